"""Unit tests for scrun_py.oci.bundle.load_bundle: reading and checking config.json."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scrun_py.base.errors import BundleError, ConfigError
from scrun_py.oci import bundle as bundle_mod
from scrun_py.oci.bundle import load_bundle


def _config(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "process": {"args": ["sh", "-c", "echo hi"], "env": ["PATH=/bin"], "cwd": "/",
                    "terminal": False},
        "annotations": {"org.example/a": "1"},
        "linux": {"namespaces": [{"type": "pid"}]},
        "hostname": "box",
    }
    config.update(changes)
    return config


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    path = tmp_path / "bundle"
    (path / "rootfs").mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(_config()))
    return path


def _write(bundle: Path, config: Any) -> None:
    (bundle / "config.json").write_text(json.dumps(config))


def _process(**changes: Any) -> dict[str, Any]:
    process: dict[str, Any] = {"args": ["sh"], "env": [], "cwd": "/"}
    process.update(changes)
    return process


def _error(bundle: Path) -> str:
    with pytest.raises(BundleError) as info:
        load_bundle(bundle)
    return str(info.value)


class TestValidBundle:
    def test_loads(self, bundle: Path) -> None:
        """A valid bundle gives its absolute path, rootfs and the typed fields."""
        loaded = load_bundle(bundle)
        assert (str(bundle), str(bundle / "rootfs"), str(bundle / "config.json")) == (
            loaded.path, loaded.rootfs, loaded.config_file)
        assert ["sh", "-c", "echo hi"] == loaded.config.process.args
        assert {"org.example/a": "1"} == loaded.config.annotations
        assert loaded.config.root.readonly is True

    def test_relative_path(self, bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A relative bundle path is made absolute (the caller's cwd is not the anchor's)."""
        monkeypatch.chdir(bundle.parent)
        assert str(bundle) == load_bundle("bundle").path

    def test_unknown_fields_are_kept(self, bundle: Path) -> None:
        """Fields scrun-py does not type survive in the raw config (policy rewrites it)."""
        raw = load_bundle(bundle).raw
        assert ("box", [{"type": "pid"}]) == (raw["hostname"], raw["linux"]["namespaces"])

    @pytest.mark.parametrize("config", [
        {"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": True},
         "process": {"args": ["sh", "-c", "x"], "env": ["A=1"], "terminal": True,
                     "cwd": "/w"}, "annotations": {"k": "v"}},
        {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["true"]}},
    ])
    def test_plain_path_matches_the_model(self, config: dict[str, Any]) -> None:
        """A config.json with exact types reads the same without pydantic as with it."""
        plain = bundle_mod._plain_config(config)
        assert plain is not None
        assert bundle_mod._model_config(config) == plain

    @pytest.mark.parametrize(("field", "value", "expected"), [
        ("terminal", "true", True), ("terminal", 1, True), ("readonly", "no", False),
    ])
    def test_coercible_values_go_through_the_model(self, bundle: Path, field: str,
                                                   value: Any, expected: bool) -> None:
        """Values pydantic coerces (a string "true") are not taken as-is: the model reads them."""
        config: dict[str, Any] = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                                  "process": {"args": ["true"]}}
        (config["process"] if field == "terminal" else config["root"])[field] = value
        assert bundle_mod._plain_config(config) is None
        _write(bundle, config)
        loaded = load_bundle(bundle).config
        got = loaded.process.terminal if field == "terminal" else loaded.root.readonly
        assert expected is got

    def test_defaults(self, bundle: Path) -> None:
        """env, annotations, terminal and cwd are optional."""
        _write(bundle, {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                        "process": {"args": ["true"]}})
        config = load_bundle(bundle).config
        assert ([], {}, False, "/") == (config.process.env, config.annotations,
                                        config.process.terminal, config.process.cwd)

    def test_absolute_root_path(self, bundle: Path, tmp_path: Path) -> None:
        """An absolute root.path is used as is, not joined to the bundle."""
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        _write(bundle, _config(root={"path": str(elsewhere)}))
        assert str(elsewhere) == load_bundle(bundle).rootfs

    def test_rootfs_is_normalized(self, bundle: Path) -> None:
        """`./rootfs/` resolves to the same rootfs path."""
        _write(bundle, _config(root={"path": "./rootfs/"}))
        assert str(bundle / "rootfs") == load_bundle(bundle).rootfs


class TestImportedEnv:
    """What `create` imports from a loaded bundle's process.env: the trust rule's
    split (site/trust.py), as commands/create.py applies it."""

    @staticmethod
    def _imported(bundle: Path, allowed: frozenset[str] | None = None) -> dict[str, str]:
        from scrun_py.site.trust import Trust

        rule = Trust() if allowed is None else Trust(container_env=allowed)
        return rule.split_env(load_bundle(bundle).config.process.env)[0]

    def test_only_allowed_names(self, bundle: Path) -> None:
        """Only the SCRUN_* names trust.CONTAINER_ENV allows are imported, values kept
        verbatim; SLURM_* (here SLURM_CONF) and unknown SCRUN_* names are not."""
        _write(bundle, _config(process=_process(env=[
            "PATH=/bin", "SCRUN_PARTITION=debug", "SLURM_CONF=/etc/s.conf", "HOME=/root",
            "SCRUN_X=a=b", "SCRUNX=1", "slurm_lower=1", "SLURM_EMPTY=", "SCRUN_NOVALUE",
            "XSLURM_Y=1", "SCRUN_ACCOUNT=a=b", "SCRUN_QOS=", "SCRUN_PROLOG=/tmp/x",
        ])))
        assert {"SCRUN_PARTITION": "debug", "SCRUN_ACCOUNT": "a=b", "SCRUN_QOS": ""} == (
            self._imported(bundle))

    def test_site_allows_more(self, bundle: Path) -> None:
        """Names the site allows are imported too."""
        _write(bundle, _config(process=_process(env=["SLURM_JOB_ID=7", "SLURM_CONF=/x"])))
        assert {"SLURM_JOB_ID": "7"} == self._imported(bundle, frozenset({"SLURM_JOB_ID"}))

    def test_empty_env(self, bundle: Path) -> None:
        """A process without env imports nothing."""
        _write(bundle, _config(process={"args": ["sh"]}))
        assert {} == self._imported(bundle)


class TestBundleErrors:
    def test_is_a_config_error(self) -> None:
        """BundleError is a ConfigError (one family for configuration problems)."""
        assert issubclass(BundleError, ConfigError)

    def test_missing_dir(self, tmp_path: Path) -> None:
        """A bundle directory that does not exist is named in the error."""
        assert f"bundle {tmp_path / 'absent'}: not a directory" == _error(tmp_path / "absent")

    def test_bundle_is_a_file(self, tmp_path: Path) -> None:
        """A bundle path that is a file is not a directory."""
        (tmp_path / "file").write_text("")
        assert f"bundle {tmp_path / 'file'}: not a directory" == _error(tmp_path / "file")

    def test_missing_config(self, bundle: Path) -> None:
        """A bundle without config.json says so."""
        (bundle / "config.json").unlink()
        assert f"bundle {bundle}: config.json not found" == _error(bundle)

    def test_config_is_a_directory(self, bundle: Path) -> None:
        """A config.json that is not a regular file is reported with the bundle."""
        (bundle / "config.json").unlink()
        (bundle / "config.json").mkdir()
        assert (f"bundle {bundle}: config.json is a directory, not a regular file: "
                "refusing it") == _error(bundle)

    @pytest.mark.parametrize("content", [b"", b"{", b"{'a': 1}", b"\xff\xfe\xfa", b"[" * 50_000])
    def test_invalid_json(self, bundle: Path, content: bytes) -> None:
        """config.json that is not JSON (or is nested absurdly deep) is named as such."""
        (bundle / "config.json").write_bytes(content)
        assert _error(bundle).startswith(f"bundle {bundle}: config.json is not valid JSON: ")

    @pytest.mark.parametrize("config", [[], "x", 1, None])
    def test_not_an_object(self, bundle: Path, config: Any) -> None:
        """A config.json whose top level is not an object is rejected."""
        _write(bundle, config)
        assert f"bundle {bundle}: config.json must be a JSON object" == _error(bundle)

    @pytest.mark.parametrize(("config", "detail"), [
        (_config(process=_process(args="sh -c true")),
         "process.args: input should be a valid list"),
        (_config(process=_process(args=[])), "process.args: value error, must not be empty"),
        (_config(process=_process(args=["sh", None])),
         "process.args.1: input should be a valid string"),
        (_config(process={"env": []}), "process.args is required"),
        (_config(root={"readonly": True}), "root.path is required"),
        (_config(root="rootfs"), "root: input should be an object"),
        (_config(process=_process(env=["A=1", 5])),
         "process.env.1: input should be a valid string"),
        (_config(process=_process(env="A=1")), "process.env: input should be a valid list"),
        (_config(annotations={"a": "1", "b": 2}), "annotations.b: input should be a valid string"),
        (_config(annotations={"a": None}), "annotations.a: input should be a valid string"),
        (_config(annotations=["a"]), "annotations: input should be an object"),
        (_config(ociVersion=1), "ociVersion: input should be a valid string"),
        ({"root": {"path": "rootfs"}, "process": {"args": ["sh"]}}, "ociVersion is required"),
        ({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, "process is required"),
    ])
    def test_invalid_field(self, bundle: Path, config: dict[str, Any], detail: str) -> None:
        """A bad field is reported on one line with the bundle and the field's JSON path."""
        _write(bundle, config)
        assert f"bundle {bundle}: config.json: {detail}" == _error(bundle)

    def test_rootfs_missing(self, bundle: Path) -> None:
        """A root.path that is not a directory is named with the bundle."""
        (bundle / "rootfs").rmdir()
        assert f"bundle {bundle}: rootfs {bundle / 'rootfs'} is not a directory" == (
            _error(bundle))

    @pytest.mark.parametrize(("config", "shown"), [
        (_config(root={"path": "rootfs\nx"}), "rootfs 'BUNDLE/rootfs\\nx' is not a directory"),
        (_config(annotations={"a\u2028b": 1}),
         "config.json: 'annotations.a\\u2028b': input should be a valid string"),
    ])
    def test_config_text_in_a_message_stays_on_one_line(self, bundle: Path,
                                                        config: dict[str, Any],
                                                        shown: str) -> None:
        """A line break from config.json in an error is written as an escape (repr)."""
        _write(bundle, config)
        assert f"bundle {bundle}: {shown.replace('BUNDLE', str(bundle))}" == _error(bundle)

    def test_rootfs_is_a_file(self, bundle: Path) -> None:
        """A root.path pointing at a file is not a rootfs."""
        (bundle / "rootfs").rmdir()
        (bundle / "rootfs").write_text("")
        assert "rootfs" in _error(bundle)


class TestSizeCap:
    """config.json is read only up to MAX_CONFIG_BYTES, and only from a regular file."""

    def test_over_the_cap_is_refused_before_reading(self, bundle: Path) -> None:
        """A sparse 400 MiB config.json is refused from its size, on one line, at once."""
        import time

        size = 400 << 20
        with open(bundle / "config.json", "r+b") as fh:
            fh.truncate(size)
        started = time.monotonic()
        message = _error(bundle)
        assert (f"bundle {bundle}: config.json is {size} bytes, more than the "
                f"{bundle_mod.MAX_CONFIG_BYTES} scrun-py reads") == message
        assert time.monotonic() - started < 1.0

    def test_the_cap_itself_is_read(self, bundle: Path) -> None:
        """A config.json of exactly MAX_CONFIG_BYTES is read (and judged as JSON)."""
        text = json.dumps(_config())
        padded = text + " " * (bundle_mod.MAX_CONFIG_BYTES - len(text))
        (bundle / "config.json").write_text(padded)
        assert "1.0.2" == load_bundle(bundle).config.ociVersion

    def test_one_byte_over_the_cap(self, bundle: Path) -> None:
        """One byte more than MAX_CONFIG_BYTES is refused."""
        (bundle / "config.json").write_bytes(b" " * (bundle_mod.MAX_CONFIG_BYTES + 1))
        assert "more than the" in _error(bundle)

    def test_growing_past_the_cap_while_read(self, bundle: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """A file that grows after the fstat is still read only up to the cap and one
        byte (a stat that reports it small stands in for the race)."""
        import os

        (bundle / "config.json").write_bytes(b" " * (bundle_mod.MAX_CONFIG_BYTES + 4096))
        real_fstat = os.fstat
        reads: list[int] = []
        real_read = os.read

        def small_fstat(fd: int) -> os.stat_result:
            st = real_fstat(fd)
            return os.stat_result((st.st_mode, *tuple(st)[1:6], 10, *tuple(st)[7:]))

        def counted_read(fd: int, n: int) -> bytes:
            data = real_read(fd, n)
            reads.append(len(data))
            return data

        monkeypatch.setattr(os, "fstat", small_fstat)
        monkeypatch.setattr(os, "read", counted_read)
        assert (f"bundle {bundle}: config.json is more than the "
                f"{bundle_mod.MAX_CONFIG_BYTES} bytes scrun-py reads") == _error(bundle)
        assert bundle_mod.MAX_CONFIG_BYTES + 1 == sum(reads)

    def test_fifo_is_refused_without_blocking(self, bundle: Path) -> None:
        """A FIFO in place of config.json (no writer) is refused at once, not waited on."""
        import os

        (bundle / "config.json").unlink()
        os.mkfifo(bundle / "config.json")
        assert (f"bundle {bundle}: config.json is a FIFO, not a regular file: "
                "refusing it") == _error(bundle)

    def test_character_device_is_refused(self, bundle: Path) -> None:
        """An endless special file (a symlink to /dev/zero) is refused, not read."""
        (bundle / "config.json").unlink()
        (bundle / "config.json").symlink_to("/dev/zero")
        assert (f"bundle {bundle}: config.json is a character device, not a regular file: "
                "refusing it") == _error(bundle)

    def test_rootfs_problem_of_a_huge_config_is_left_to_the_node(self, bundle: Path) -> None:
        """bundle_rootfs_problem reads through the same cap: nothing to say, at once."""
        from scrun_py.oci.bundle import bundle_rootfs_problem

        with open(bundle / "config.json", "r+b") as fh:
            fh.truncate(400 << 20)
        assert "" == bundle_rootfs_problem(str(bundle), "22.05")

    def test_rootfs_problem_of_a_fifo_is_left_to_the_node(self, bundle: Path) -> None:
        import os

        from scrun_py.oci.bundle import bundle_rootfs_problem

        (bundle / "config.json").unlink()
        os.mkfifo(bundle / "config.json")
        assert "" == bundle_rootfs_problem(str(bundle), "22.05")


class TestOciVersion:
    """The runtime spec: ociVersion MUST be SemVer 2.0.0, and a runtime MUST generate an
    error for a value it does not support (runtime-tools' misc_props checks "invalid")."""

    @pytest.mark.parametrize("version", ["1.0.0", "1.0.2", "1.3.0", "1.0.2-dev", "1.1.0+dev",
                                         "1.0.0-rc.1+build.5", "1.20.300"])
    def test_versions_engines_write_are_accepted(self, bundle: Path, version: str) -> None:
        """Released versions, docker's `-dev` and `+dev` suffixes: all of major 1."""
        _write(bundle, _config(ociVersion=version))
        assert version == load_bundle(bundle).config.ociVersion

    @pytest.mark.parametrize("version", ["invalid", "", "1", "1.0", "1.0.0.0", "01.0.0",
                                         "1.00.0", "v1.0.0", "1.0.0-", "1.0.0+", "1.0.0-a..b",
                                         " 1.0.0", "1.0.0\n", "\u0661.0.0"])
    def test_not_semver_is_refused(self, bundle: Path, version: str) -> None:
        """Anything that is not SemVer 2.0.0 is named, on one line, with the bundle."""
        _write(bundle, _config(ociVersion=version))
        assert (f"bundle {bundle}: config.json: ociVersion {version!r} is not a SemVer 2.0.0 "
                "version") == _error(bundle)

    @pytest.mark.parametrize("version", ["0.9.0", "2.0.0", "10.1.0-dev"])
    def test_other_major_is_refused(self, bundle: Path, version: str) -> None:
        """A SemVer version of another major than 1 is refused as unsupported."""
        _write(bundle, _config(ociVersion=version))
        assert (f"bundle {bundle}: config.json: ociVersion {version!r} is not supported "
                "(only 1.x)") == _error(bundle)

    def test_checked_on_the_model_path_too(self, bundle: Path) -> None:
        """A config that goes through the pydantic model (a coercible field) is checked."""
        _write(bundle, _config(ociVersion="invalid", process=_process(terminal="false")))
        assert "ociVersion 'invalid' is not a SemVer 2.0.0 version" in _error(bundle)


class TestBundleRootfsProblem:
    """For Slurm 22.05, whose slurmstepd runs BUNDLE/rootfs whatever root.path says."""

    @pytest.mark.parametrize("root", ["rootfs", "rootfs/", "./rootfs", "ROOT"])
    def test_rootfs_of_the_bundle_is_fine(self, bundle: Path, root: str) -> None:
        from scrun_py.oci.bundle import bundle_rootfs_problem

        _write(bundle, _config(root={"path": str(bundle / "rootfs") if root == "ROOT"
                                     else root}))
        assert "" == bundle_rootfs_problem(str(bundle), "22.05")

    def test_a_symlink_to_the_same_directory_is_fine(self, bundle: Path) -> None:
        from scrun_py.oci.bundle import bundle_rootfs_problem

        (bundle / "real").mkdir()
        (bundle / "rootfs").rmdir()
        (bundle / "rootfs").symlink_to("real")
        _write(bundle, _config(root={"path": "real"}))
        assert "" == bundle_rootfs_problem(str(bundle), "22.05")

    @pytest.mark.parametrize("root", [".", "other", "/elsewhere"])
    def test_another_directory_is_named(self, bundle: Path, root: str) -> None:
        from scrun_py.oci.bundle import bundle_rootfs_problem

        _write(bundle, _config(root={"path": root}))
        assert (f"bundle {bundle}: Slurm 22.05 runs the container from {bundle}/rootfs, "
                f"not from root.path {root!r}") == bundle_rootfs_problem(str(bundle), "22.05")

    @pytest.mark.parametrize("content", [None, b"{", b"[]", b'{"root": 1}', b'{"root": {}}',
                                         b'{"root": {"path": 1}}', b"\xff",
                                         b'{"root": {"path": "a\\u0000b"}}'])
    def test_what_cannot_be_read_here_is_left_to_the_node(self, bundle: Path,
                                                          content: bytes | None) -> None:
        from scrun_py.oci.bundle import bundle_rootfs_problem

        if content is None:
            (bundle / "config.json").unlink()
        else:
            (bundle / "config.json").write_bytes(content)
        assert "" == bundle_rootfs_problem(str(bundle), "22.05")


class TestWriteConfig:
    def test_replaces_config_keeping_mode_and_leaving_no_temp_file(self, bundle: Path) -> None:
        from scrun_py.oci.bundle import write_config

        (bundle / "config.json").chmod(0o640)
        loaded = load_bundle(bundle)
        changed = {**loaded.raw, "root": {"path": "rootfs", "readonly": False}}
        write_config(loaded, changed)
        assert changed == json.loads((bundle / "config.json").read_text())
        assert 0o640 == (bundle / "config.json").stat().st_mode & 0o777
        assert ["config.json", "rootfs"] == sorted(p.name for p in bundle.iterdir())

    def test_root_keeps_the_owner(self, bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """As root, the new config.json is given the old one's owner before it is written
        (an engine's bundle belongs to its user)."""
        import os

        from scrun_py.oci.bundle import write_config

        st = (bundle / "config.json").stat()
        given: list[tuple[int, int]] = []
        monkeypatch.setattr(os, "getuid", lambda: 0)
        monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: given.append((uid, gid)))
        loaded = load_bundle(bundle)
        write_config(loaded, loaded.raw)
        assert [(st.st_uid, st.st_gid)] == given
        assert ["config.json", "rootfs"] == sorted(p.name for p in bundle.iterdir())

    def test_unwritable_bundle_is_a_bundle_error(self, bundle: Path) -> None:
        from scrun_py.oci.bundle import write_config

        loaded = load_bundle(bundle)
        (bundle / "config.json").unlink()
        (bundle / "config.json").mkdir()  # os.replace cannot put a file over a directory
        with pytest.raises(BundleError) as exc:
            write_config(loaded, loaded.raw)
        assert "cannot rewrite config.json" in str(exc.value)
        assert ["config.json", "rootfs"] == sorted(p.name for p in bundle.iterdir())


class TestProgramInRootfs:
    """A program name is looked up inside the rootfs on the container's PATH, as the
    runtime would: srun would look it up on the login node's PATH instead."""

    @pytest.fixture
    def rootfs(self, tmp_path: Path) -> Path:
        (tmp_path / "bin").mkdir()
        (tmp_path / "usr" / "bin").mkdir(parents=True)
        (tmp_path / "bin" / "busybox").write_text("")
        (tmp_path / "bin" / "sh").symlink_to("busybox")
        (tmp_path / "usr" / "bin" / "env").symlink_to("/bin/busybox")  # dangling on the host
        return tmp_path

    def test_found_on_the_containers_path(self, rootfs: Path) -> None:
        from scrun_py.oci.bundle import program_in_rootfs
        assert ["/bin/sh", "-c", "x"] == program_in_rootfs(
            ["sh", "-c", "x"], ["PATH=/usr/bin:/bin"], str(rootfs))
        # a link that only resolves inside the container counts
        assert ["/usr/bin/env"] == program_in_rootfs(["env"], ["PATH=/usr/bin:/bin"],
                                                     str(rootfs))
        # the last PATH of process.env wins, as in the container's environment
        assert ["sh"] == program_in_rootfs(["sh"], ["PATH=/bin", "PATH=/usr/bin"],
                                           str(rootfs))

    def test_default_path_without_one(self, rootfs: Path) -> None:
        from scrun_py.oci.bundle import program_in_rootfs
        assert ["/usr/bin/env"] == program_in_rootfs(["env"], ["TERM=x"], str(rootfs))

    @pytest.mark.parametrize("args", [["./pause"], ["bin/x", "-v"], ["../up/x"]])
    def test_relative_path_under_the_working_directory(self, rootfs: Path,
                                                      args: list[str]) -> None:
        from scrun_py.oci.bundle import program_in_rootfs
        resolved = program_in_rootfs(args, ["PATH=/bin"], str(rootfs), "/home/podman")
        assert [f"/home/podman/{args[0]}", *args[1:]] == resolved

    def test_relative_path_with_a_relative_working_directory_left_alone(
            self, rootfs: Path) -> None:
        from scrun_py.oci.bundle import program_in_rootfs
        assert ["./x"] == program_in_rootfs(["./x"], [], str(rootfs), "home")

    @pytest.mark.parametrize("args", [["/bin/sh"], ["nosuch"], [""]])
    def test_left_alone(self, rootfs: Path, args: list[str]) -> None:
        from scrun_py.oci.bundle import program_in_rootfs
        assert args == program_in_rootfs(args, ["PATH=/usr/bin:/bin"], str(rootfs))
