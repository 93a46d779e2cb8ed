-- The prelude scrun-py runs in every fresh Lua runtime before scrun.lua: it builds the
-- `slurm` and `json` tables.  hooks/lua.py runs it with the Python callbacks and the
-- constants as arguments (`...`).  Formatting (string.format), argument-order handling
-- and error positions are done here, in Lua, so that errors point at the calling
-- line of the site script.
local py, constants = ...
local type, tostring, tonumber, select = type, tostring, tonumber, select
local error, pcall, xpcall, rawequal = error, pcall, xpcall, rawequal
local getmetatable, setmetatable, pairs = getmetatable, setmetatable, pairs
local format, concat, traceback = string.format, table.concat, debug.traceback
local unpack = table.unpack or unpack
local function pack(...) return { n = select("#", ...), ... } end

-- Names that moved between Lua 5.1 and 5.2+, added only where missing, so scripts
-- written for Debian's Slurm (5.1) and for RHEL's (5.3/5.4) both run.
if table.unpack == nil then table.unpack = unpack end
if table.pack == nil then table.pack = pack end
if _G.unpack == nil then _G.unpack = unpack end
if _G.loadstring == nil then _G.loadstring = load end
if table.getn == nil then table.getn = function(t) return #t end end
if math.pow == nil then math.pow = function(x, y) return x ^ y end end
_G.python = nil

-- Call a Python callback; its exception becomes a Lua error at the script's calling line
-- (level 1 is this function, 2 the slurm.* wrapper, 3 the script).
local function call(name, fn, ...)
  local r = pack(pcall(fn, ...))
  if not r[1] then error(name .. ": " .. tostring(r[2]), 3) end
  return unpack(r, 2, r.n)
end

local function fmt(...)
  local ok, s = pcall(format, ...)
  if not ok then error(s, 3) end
  return s
end

local slurm = {}
for k, v in pairs(constants) do slurm[k] = v end

function slurm.set_bundle_path(path)
  local previous = call("slurm.set_bundle_path", py.set_bundle_path, path)
  return previous
end

function slurm.set_root_path(path)
  local previous = call("slurm.set_root_path", py.set_root_path, path)
  return previous
end

function slurm.allocator_command(cmd)
  if type(cmd) ~= "string" then error("slurm.allocator_command: cmd must be a string", 2) end
  local status, output = call("slurm.allocator_command", py.allocator_command, cmd)
  return status, output
end

function slurm.remote_command(cmd)
  if type(cmd) ~= "string" then error("slurm.remote_command: cmd must be a string", 2) end
  local status, output = call("slurm.remote_command", py.remote_command, cmd)
  return status, output
end

-- Slurm's order is slurm.log(level, msg); slurm.log(msg, level) is accepted too.
local function level_and_msg(...)
  local n, a, b = select("#", ...), ...
  if n >= 2 then
    if type(a) == "number" then return a, b end
    if type(b) == "number" then return b, a end
    if tonumber(a) ~= nil then return tonumber(a), b end
    if tonumber(b) ~= nil then return tonumber(b), a end
  end
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  return 0, concat(parts, " ")
end

function slurm.log(...)
  local level, msg = level_and_msg(...)
  call("slurm.log", py.log, level, tostring(msg))
end

function slurm.error(msg)
  call("slurm.error", py.log_error, tostring(msg))
end

local function leveled(level, name)
  return function(...)
    local msg = fmt(...)
    call(name, py.log, level, msg)
  end
end
slurm.log_info = leveled(0, "slurm.log_info")
slurm.log_verbose = leveled(1, "slurm.log_verbose")
slurm.log_debug = leveled(2, "slurm.log_debug")
slurm.log_debug2 = leveled(3, "slurm.log_debug2")
slurm.log_debug3 = leveled(4, "slurm.log_debug3")
slurm.log_debug4 = leveled(5, "slurm.log_debug4")

function slurm.log_error(...)
  local msg = fmt(...)
  call("slurm.log_error", py.log_error, msg)
end

function slurm.log_user(...)
  local msg = fmt(...)
  call("slurm.log_user", py.log_user, msg)
end

function slurm.time_str2mins(s)
  if type(s) == "number" then s = tostring(s) elseif type(s) ~= "string" then s = nil end
  local minutes = call("slurm.time_str2mins", py.time_str2mins, s)
  return minutes
end

-- JSON.  Tables made by from_json carry a metatable with __jsontype ("array"/"object", the
-- dkjson convention) so that empty arrays and objects survive a round trip.
local array_mt = { __jsontype = "array" }
local object_mt = { __jsontype = "object" }
local null = setmetatable({}, {
  __tostring = function() return "null" end,
  __newindex = function() error("slurm.json_null is read-only", 2) end,
})
slurm.json_null = null

local function mark(t, mt, name)
  if t == nil then t = {} end
  if type(t) ~= "table" then error(name .. ": expected a table", 3) end
  return setmetatable(t, mt)
end
function slurm.json_array(t) local r = mark(t, array_mt, "slurm.json_array"); return r end
function slurm.json_object(t) local r = mark(t, object_mt, "slurm.json_object"); return r end

function slurm.to_json(value, pretty)
  local s = call("slurm.to_json", py.to_json, value, pretty and true or false)
  return s
end

function slurm.from_json(s)
  if type(s) ~= "string" then error("slurm.from_json: expected a string", 2) end
  local value = call("slurm.from_json", py.from_json, s, null)
  return value
end

function slurm.to_yaml() error("slurm.to_yaml is not supported by scrun-py", 2) end
function slurm.from_yaml() error("slurm.from_yaml is not supported by scrun-py", 2) end

_G.slurm = slurm

package.preload["json"] = function()
  local json = { null = null, version = "scrun-py" }
  function json.encode(value, state)
    local pretty = type(state) == "table" and state.indent and true or false
    local s = call("json.encode", py.to_json, value, pretty)
    return s
  end
  function json.decode(s, pos, nullval)
    if type(s) ~= "string" then error("json.decode: expected a string", 2) end
    if pos ~= nil then s = s:sub(pos) end
    local value = call("json.decode", py.from_json, s, nullval)
    return value, #s + (pos or 1)
  end
  return json
end

-- Helpers for Python, not visible to the script.
local function kind_of(v)
  if rawequal(v, null) then return "null" end
  local t = type(v)
  if t ~= "table" then return t end
  local mt = getmetatable(v)
  if type(mt) == "table" then
    local jt = rawget(mt, "__jsontype")
    if jt == "array" or jt == "object" then return jt end
  end
  return "table"
end

local function new_table(kind)
  return setmetatable({}, kind == "array" and array_mt or object_mt)
end

-- Run fn(...) and describe the outcome: ok, then the result kind and number, or the
-- one-line error and a traceback.  A numeric string counts as a number, as in Slurm.
local function run(fn, ...)
  local args, tb = pack(...), nil
  local ok, rv = xpcall(function() return fn(unpack(args, 1, args.n)) end,
                        function(e) tb = traceback(tostring(e), 2); return e end)
  if not ok then return false, tostring(rv), tb end
  if type(rv) == "number" then return true, "number", rv end
  if type(rv) == "string" and tonumber(rv) ~= nil then return true, "number", tonumber(rv) end
  return true, type(rv), nil
end

local function load_script(path)
  local chunk, err = loadfile(path)
  if not chunk then return false, tostring(err), nil end
  return run(chunk)
end

local function call_hook(name, ...)
  local fn = _G[name]
  if type(fn) ~= "function" then return false, "function " .. name .. " is not defined", nil end
  return run(fn, ...)
end

local function is_function(name) return type(_G[name]) == "function" end

return { kind_of = kind_of, new_table = new_table, load_script = load_script,
         call_hook = call_hook, is_function = is_function }
