"""scrun.lua support: the hook contract (``contract``) and the Lua runtime that runs it
(``lua``)."""
