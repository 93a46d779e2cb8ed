"""scrun.lua support: the hook contract (``spec``) and the Lua runtime that runs it (``lua``)."""
