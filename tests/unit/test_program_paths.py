"""Every program scrun-py runs is named by an absolute path, or found by a resolver that
looks in PATH's absolute entries only, checked by parsing every module of scrun_py/.

An empty or relative PATH entry names the directory a program is started in: for the
job's shells and steps, a directory the image chooses (SCRUN_WORKING_DIR), where another
user may have left a program named `env` or `timeout`.  The scan checks:

* each call that starts a program (subprocess.*, os.exec*, os.posix_spawn*, os.spawn*,
  os.system, os.popen): the program is an absolute path literal, a call to a
  `*resolve_program` function, sys.executable, or a name bound only to those in its
  function (`executable=` counts for subprocess).  procs.run and procs.spawn resolve
  argv[0] themselves, so their callers may name a bare program;
* an argv literal (a list, or a tuple a call is given) whose head runs another program
  by name (env, timeout, unshare…): that program is named so too;
* the shell scripts: the string after "/bin/sh", "-c" in an argv literal, the module
  constants named *_SCRIPT or *_PROLOGUE, what functions named *_script or *_command
  return.  Each command word is a shell builtin or keyword, an absolute path, or a
  value put in (an f-string's or a format template's field, a parameter expansion).
  The scripts that run on compute nodes (NODE_SIDE) are left out: slurm/argv.py's
  builders start them with NODE_PATH_PROLOGUE, which keeps the absolute entries of the
  node's PATH (tests/unit/test_planted_programs.py runs it).
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "scrun_py"

#: calls that start a program; the value: the index of the program's argument
STARTERS = {
    **{f"subprocess.{name}": 0 for name in ("Popen", "run", "call", "check_call",
                                            "check_output", "getoutput",
                                            "getstatusoutput")},
    **{f"os.{name}": 0 for name in ("execv", "execve", "execvp", "execvpe", "execl",
                                    "execle", "execlp", "execlpe", "posix_spawn",
                                    "posix_spawnp", "system", "popen")},
    **{f"os.{name}": 1 for name in ("spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl",
                                    "spawnle", "spawnlp", "spawnlpe")},
}
#: a shell command string, never an argv
SHELL_STARTERS = {"os.system", "os.popen", "subprocess.getoutput",
                  "subprocess.getstatusoutput"}
#: programs that run the program their argv names next (after `--`, or after their
#: options and this many other words: timeout's duration, flock's lock file…)
WRAPPERS = {"env": 0, "timeout": 1, "unshare": 0, "nice": 0, "nohup": 0, "setsid": 0,
            "flock": 1, "stdbuf": 0, "chroot": 1, "sudo": 0, "xargs": 0, "salloc": 0,
            "ionice": 0, "taskset": 1}
#: their options that take the next word as a value
VALUE_OPTIONS = frozenset({"-u", "--unset", "-C", "--chdir", "-s", "--signal", "-k",
                           "--kill-after", "-n", "--adjustment", "-c", "--class", "-w",
                           "--timeout", "-i", "-o", "-e", "-E", "-S", "--split-string"})
#: the shell's builtins and reserved words that may stand where a command does
BUILTINS = frozenset({
    ":", ".", "[", "alias", "bg", "break", "cd", "command", "continue", "echo", "eval",
    "exec", "exit", "export", "false", "fg", "getopts", "hash", "jobs", "kill", "local",
    "printf", "pwd", "read", "readonly", "return", "set", "shift", "test", "times", "trap",
    "true", "type", "ulimit", "umask", "unalias", "unset", "wait"})
#: reserved words after which a command follows
OPENERS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
CLOSERS = frozenset({"fi", "done", "esac", "}"})
#: builtins whose next word is the command they run
PREFIXES = frozenset({"exec", "command"})
#: stands for a value an f-string puts in
FIELD = "\x00"

#: scripts that run on compute nodes only, behind NODE_PATH_PROLOGUE: ("module", scope)
NODE_SIDE = {
    ("scrun_py/slurm/node_step.py", "_PS_SCRIPT"): "ps on the node, after the prologue",
    ("scrun_py/slurm/node_step.py", "_EXEC_SCRIPT"): "exec on the node, after the prologue",
    ("scrun_py/slurm/node_step.py", "_EXEC_TTY_SCRIPT"):
        "exec with a terminal on the node, after the prologue",
    ("scrun_py/slurm/node_step.py", "ps_script"): "_PS_SCRIPT filled in",
    ("scrun_py/slurm/node_step.py", "_SIGNAL_SCRIPT"):
        "signals exec's runtime on the node, after the prologue",
    ("scrun_py/slurm/node_step.py", "signal_script"): "_SIGNAL_SCRIPT filled in",
}
#: what the scan cannot follow, each with why it is safe: ("module", scope, kind)
NOT_FOLLOWED = {
    ("scrun_py/hooks/lua.py", "_allocator_command", "script"):
        "the site's Lua command: hooks/_builtins.py command_env gives its shell a PATH "
        "of absolute entries only (test_planted_programs checks it)",
}


class Finding:
    def __init__(self, module: str, line: int, scope: str, kind: str, what: str) -> None:
        self.module, self.line, self.scope, self.kind, self.what = (module, line, scope,
                                                                    kind, what)

    def __repr__(self) -> str:
        return f"{self.module}:{self.line} ({self.scope}) {self.kind}: {self.what}"


# -- the shell words ---------------------------------------------------------------------

def _skip_quoted(text: str, i: int, subs: list[str]) -> int:
    """The index after the quoted part starting at text[i]; command substitutions inside
    double quotes go to `subs`."""
    quote = text[i]
    i += 1
    while i < len(text) and text[i] != quote:
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if quote == '"' and text.startswith("$(", i):
            i = _skip_dollar(text, i, subs)
            continue
        i += 1
    return i + 1


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """The index after the `close` that matches the `open_` at text[i]."""
    depth = 0
    while i < len(text):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        elif text[i] in "'\"":
            i = _skip_quoted(text, i, []) - 1
        i += 1
    return i


def _skip_dollar(text: str, i: int, subs: list[str]) -> int:
    """After a `$(…)` (its text to `subs`), `$((…))` or `${…}` starting at text[i]."""
    if text.startswith("$((", i):
        return _matching(text, i + 1, "(", ")")
    if text.startswith("$(", i):
        end = _matching(text, i + 1, "(", ")")
        subs.append(text[i + 2:end - 1])
        return end
    if text.startswith("${", i):
        return _matching(text, i + 1, "{", "}")
    return i + 1


def _word_end(text: str, i: int, subs: list[str]) -> int:
    while i < len(text):
        c = text[i]
        if c in "'\"":
            i = _skip_quoted(text, i, subs)
        elif c == "$":
            i = _skip_dollar(text, i, subs)
        elif c == "\\":
            i += 2
        elif c == "&" and i > 0 and text[i - 1] in "<>":
            i += 1  # 2>&1
        elif c in " \t\n;&|()":
            return i
        else:
            i += 1
    return i


def shell_tokens(text: str) -> tuple[list[str], list[str]]:
    """The words and operators of `text` (newlines as `;`), and the text of each command
    substitution in it."""
    tokens: list[str] = []
    subs: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t":
            i += 1
        elif c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif text.startswith(("&&", "||", ";;"), i):
            tokens.append(text[i:i + 2])
            i += 2
        elif c in "\n;&|()":
            tokens.append(";" if c == "\n" else c)
            i += 1
        else:
            end = _word_end(text, i, subs)
            tokens.append(text[i:end])
            i = end
    return tokens, subs


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def _is_redirect(word: str) -> bool:
    return word.lstrip("0123456789")[:1] in ("<", ">")


def command_words(text: str) -> list[str]:
    """The words of `text` that name the command to run (of its substitutions too)."""
    tokens, subs = shell_tokens(text)
    words: list[str] = []
    state = "cmd"
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
        elif state == "for":
            state = "cmd" if tok == "do" else state
        elif state == "case":
            state = "pattern" if tok == "in" else state
        elif state == "pattern":
            state = {")": "cmd", "esac": "args"}.get(tok, state)
        elif tok == ";;":
            state = "pattern"
        elif tok in (";", "&&", "||", "|", "&", "("):
            state = "cmd"
        elif state != "cmd" or tok in OPENERS or _is_assignment(tok):
            pass
        elif _is_redirect(tok):  # `> file`: the file is the next word
            skip_next = tok.lstrip("0123456789") in ("<", ">", ">>", "<>", ">|")
        elif tok in CLOSERS or tok == ")":
            state = "args"
        elif tok in ("for", "case"):
            state = tok
        else:
            words.append(tok)
            state = "cmd" if tok in PREFIXES else "args"
    return words + [w for sub in subs for w in command_words(sub)]


def bad_words(text: str) -> list[str]:
    """The command words of `text` that a PATH lookup would find: not builtins, not
    absolute, not a value put in."""
    out = []
    for word in command_words(text):
        bare = word.strip("'\"")
        if (word in BUILTINS or bare.startswith("/") or FIELD in word or "$" in word
                or (word.startswith("{") and word.endswith("}"))
                or (word.startswith("-") and word != "-")):
            continue
        out.append(word)
    return out


# -- the Python source ---------------------------------------------------------------------

def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _wrapped(rest: list[ast.expr], positionals: int) -> ast.expr | None:
    """The program a wrapper's arguments `rest` name: after `--`, else the first word
    that is no option, option value, NAME=value or one of its `positionals`."""
    words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None
             for e in rest]
    if "--" in words:
        after = rest[words.index("--") + 1:]
        return after[0] if after else None
    i = 0
    while i < len(rest):
        word = words[i]
        if word is not None and word.startswith("-"):
            i += 2 if word in VALUE_OPTIONS else 1
        elif word is not None and "=" in word and not word.startswith("/"):
            i += 1
        elif positionals:
            positionals -= 1
            i += 1
        else:
            return rest[i]
    return None


class ModuleScan:
    """One module's findings (`scan`)."""

    def __init__(self, source: str, module: str) -> None:
        self.tree = ast.parse(source)
        self.module = module
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str]] = set()  # NOT_FOLLOWED (scope, kind) met
        self.constants = {t.id: n.value for n in self.tree.body if isinstance(n, ast.Assign)
                          for t in n.targets if isinstance(t, ast.Name)}
        self.aliases = {a.asname or a.name: f"{n.module}.{a.name}"
                        for n in self.tree.body if isinstance(n, ast.ImportFrom)
                        and n.module in ("os", "subprocess") for a in n.names}
        self.parents: dict[ast.AST, ast.AST] = {
            child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)}

    def scope_of(self, node: ast.AST) -> ast.AST:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return self.tree

    def name_of(self, scope: ast.AST) -> str:
        return getattr(scope, "name", "<module>")

    def report(self, node: ast.AST, kind: str, what: str) -> None:
        scope = self.name_of(self.scope_of(node))
        if (self.module, scope, kind) in NOT_FOLLOWED:
            self.seen.add((scope, kind))
            return
        self.findings.append(Finding(self.module, getattr(node, "lineno", 0), scope, kind,
                                     what))

    # -- programs ------------------------------------------------------------------------------
    def resolved(self, node: ast.expr, scope: ast.AST, depth: int = 0) -> bool:
        """Whether `node` is a program found without PATH's relative entries."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.startswith("/")
        if isinstance(node, ast.Call):
            return _dotted(node.func).rsplit(".", 1)[-1].endswith("resolve_program")
        if isinstance(node, ast.BoolOp):
            return all(self.resolved(v, scope, depth) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.resolved(node.body, scope) and self.resolved(node.orelse, scope)
        if _dotted(node) == "sys.executable":
            return True
        if isinstance(node, ast.Name) and depth < 5:
            values = [n.value for n in ast.walk(scope) if isinstance(n, ast.Assign)
                      for t in n.targets if isinstance(t, ast.Name) and t.id == node.id]
            return bool(values) and all(self.resolved(v, scope, depth + 1) for v in values)
        return False

    def check_call(self, call: ast.Call) -> None:
        name = _dotted(call.func)
        name = self.aliases.get(name, name)
        if name in SHELL_STARTERS:
            self.report(call, "program", f"{name} runs a shell command string")
            return
        if name not in STARTERS:
            return
        scope = self.scope_of(call)
        executable = next((k.value for k in call.keywords if k.arg == "executable"), None)
        index = STARTERS[name]
        if executable is not None:
            program: ast.expr | None = executable
        elif len(call.args) > index:
            program = call.args[index]
            if name.startswith("subprocess.") and isinstance(program, (ast.List, ast.Tuple)):
                program = program.elts[0] if program.elts else None
        else:
            program = None
        if program is None or not self.resolved(program, scope):
            shown = ast.unparse(program) if program is not None else "?"
            self.report(call, "program", f"{name} runs {shown}, not a resolved path")

    def is_argument(self, node: ast.expr) -> bool:
        """Whether `node` is a call's first argument (an argv; other tuples are not)."""
        call = self.parents.get(node)
        return isinstance(call, ast.Call) and bool(call.args) and call.args[0] is node

    def check_wrapper(self, node: ast.List | ast.Tuple) -> None:
        """An argv literal (a list, or a tuple given to a call) headed by a program that
        runs the next one by name."""
        head = node.elts[0] if node.elts else None
        if not (isinstance(head, ast.Constant) and isinstance(head.value, str)
                and head.value.rsplit("/", 1)[-1] in WRAPPERS):
            return
        nxt = _wrapped(node.elts[1:], WRAPPERS[head.value.rsplit("/", 1)[-1]])
        if nxt is None or isinstance(nxt, ast.Starred):
            return  # the program comes from outside this literal
        if not self.resolved(nxt, self.scope_of(node)):
            self.report(node, "program", f"{head.value} runs {ast.unparse(nxt)} by name")

    # -- scripts -------------------------------------------------------------------------------
    def text(self, node: ast.expr | None, depth: int = 0) -> str | None:
        """A script's text, FIELD for each value put in; None when it is no string."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            return "".join(str(v.value) if isinstance(v, ast.Constant) else FIELD
                           for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.text(node.left, depth), self.text(node.right, depth)
            if left is None and right is None:
                return None
            return (left if left is not None else FIELD) + (right if right is not None
                                                             else FIELD)
        if isinstance(node, ast.Name) and node.id in self.constants and depth < 5:
            return self.text(self.constants[node.id], depth + 1)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "format"):
            return self.text(node.func.value, depth)
        return None

    def check_script(self, node: ast.expr, where: ast.AST, scope: str) -> None:
        if (self.module, scope) in NODE_SIDE:
            self.seen.add((scope, "node"))
            return
        text = self.text(node)
        if text is None:
            self.report(where, "script", f"a script the scan cannot read: "
                                         f"{ast.unparse(node)[:60]}")
            return
        for word in bad_words(text):
            self.report(where, "script", f"command word {word!r} is looked up in PATH")

    def check_sh_argv(self, node: ast.List | ast.Tuple) -> None:
        elts = node.elts
        for i in range(len(elts) - 2):
            shell, dash_c, script = elts[i], elts[i + 1], elts[i + 2]
            if not (isinstance(shell, ast.Constant) and isinstance(dash_c, ast.Constant)
                    and str(shell.value).rsplit("/", 1)[-1] in ("sh", "bash", "dash")
                    and dash_c.value == "-c"):
                continue
            func = _dotted(script.func) if isinstance(script, ast.Call) else ""
            if func.endswith("_script"):
                continue  # the function's returns are scanned (node_script: node-side)
            self.check_script(script, node, self.name_of(self.scope_of(node)))

    def check_returns(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not func.name.endswith(("_script", "_command")):
            return
        for node in ast.walk(func):
            if isinstance(node, ast.Return) and node.value is not None:
                values = ([node.value.body, node.value.orelse]
                          if isinstance(node.value, ast.IfExp) else [node.value])
                for value in values:
                    if self.text(value) is not None:
                        self.check_script(value, node, func.name)

    def scan(self) -> ModuleScan:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id.endswith(("_SCRIPT", "_PROLOGUE"))
                    for t in stmt.targets):
                name = next(t.id for t in stmt.targets if isinstance(t, ast.Name))
                self.check_script(stmt.value, stmt, name)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                self.check_call(node)
            elif isinstance(node, (ast.List, ast.Tuple)):
                if isinstance(node, ast.List) or self.is_argument(node):
                    self.check_wrapper(node)
                self.check_sh_argv(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.check_returns(node)
        return self


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        yield path.relative_to(PACKAGE_DIR.parent).as_posix(), path.read_text()


def scan_package() -> tuple[list[Finding], set[tuple[str, str, str]]]:
    """Every finding in scrun_py/, and the NOT_FOLLOWED/NODE_SIDE entries met."""
    findings: list[Finding] = []
    met: set[tuple[str, str, str]] = set()
    for module, source in _modules():
        result = ModuleScan(source, module).scan()
        findings += result.findings
        met |= {(module, scope, kind) for scope, kind in result.seen}
    return findings, met


class TestPackage:
    def test_every_program_is_resolved(self) -> None:
        """No program of scrun_py is found through PATH's relative entries."""
        assert [] == scan_package()[0]

    def test_the_exceptions_are_still_needed(self) -> None:
        """Each NOT_FOLLOWED and NODE_SIDE entry is still met (else it goes)."""
        met = scan_package()[1]
        assert set() == set(NOT_FOLLOWED) - met
        assert set() == {(m, s, "node") for m, s in NODE_SIDE} - met

    def test_the_scan_sees_the_package(self) -> None:
        """The scan reaches the calls and scripts it is about, else it proves nothing."""
        scans = {module: ModuleScan(source, module) for module, source in _modules()}
        procs = scans["scrun_py/base/procs.py"]
        starters = {_dotted(n.func) for n in ast.walk(procs.tree) if isinstance(n, ast.Call)}
        assert {"os.posix_spawn", "subprocess.Popen"} <= starters
        argv = scans["scrun_py/slurm/argv.py"]
        assert {"NODE_PATH_PROLOGUE"} <= set(argv.constants)


# -- the scanner finds a planted regression -----------------------------------------------

PLANTED = '''
import os
import subprocess
from subprocess import check_output

HOLDER_SCRIPT = "env -0; printf x; exit 0"

def run():
    subprocess.run(["env"])
    subprocess.Popen(["/bin/sh", "-c", "env -0"])
    check_output(["squeue"])
    program = "srun"
    os.posix_spawn(program, [program], {})
    os.execvp("crun", ["crun"])
    procs.run(["/usr/bin/env", "-u", "X", "srun", "--version"])

def abandon_script(argv):
    return f"timeout 30 {argv}"

def fine(env):
    subprocess.run(["/usr/bin/env"])
    subprocess.run(["env"], executable=procs.resolve_program("env", env))
    program = procs.resolve_program("srun", env)
    os.posix_spawn(program, [program], {})
    procs.run(["scancel", "1"])
    procs.run(["/bin/sh", "-c", 'cd -- "$0" && exec "$@"'])
'''


class TestScannerFindsRegressions:
    def test_planted_calls_and_scripts_are_reported(self) -> None:
        """A bare `subprocess.run(["env"])` and a shell string `"env -0"` are reported,
        and so is every other planted way in; the fine ones are not."""
        found = [(f.scope, f.kind, f.what) for f in ModuleScan(PLANTED, "planted.py")
                 .scan().findings]
        assert sorted([
            ("<module>", "script", "command word 'env' is looked up in PATH"),
            ("run", "program", "subprocess.run runs 'env', not a resolved path"),
            ("run", "script", "command word 'env' is looked up in PATH"),
            ("run", "program", "subprocess.check_output runs 'squeue', not a resolved path"),
            ("run", "program", "os.posix_spawn runs program, not a resolved path"),
            ("run", "program", "os.execvp runs 'crun', not a resolved path"),
            ("run", "program", "/usr/bin/env runs 'srun' by name"),
            ("abandon_script", "script", "command word 'timeout' is looked up in PATH"),
        ]) == sorted(found)

    @pytest.mark.parametrize(("script", "bad"), [
        ("env -0", ["env"]),
        ("printf x; exit 0", []),
        ('cd -- "$0" && exec "$@"', []),
        ("exec crun run x", ["crun"]),
        ("a=1 b=2 sed -n p >/dev/null 2>&1 || true", ["sed"]),
        ('x=$(id -un); echo "$(whoami)"', ["id", "whoami"]),
        ("if ! read rc; then [ -r f ] && /bin/sh f; fi; exit 1", []),
        ("for t in 0 1; do crun kill $t && rc=0; done", ["crun"]),
        ('case "$d" in *" "x" "*) rc=0; continue;; y) sleep 1;; esac; exit $rc', ["sleep"]),
        ("until [ $n -ge 3 ]; do n=$((n+1)); done", []),
        ("cat f | tr a b > out", ["cat", "tr"]),
        ("'/opt/a b/env' -0", []),
        (f"{FIELD} 30 {FIELD}", []),
        ("{ps} 2>/dev/null && exit 0", []),
        ("timeout 30 /usr/bin/env", ["timeout"]),
    ])
    def test_command_words(self, script: str, bad: list[str]) -> None:
        """The words that name a command, in every position a shell has one."""
        assert bad == bad_words(script)
