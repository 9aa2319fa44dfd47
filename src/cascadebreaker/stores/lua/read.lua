-- The shared state, for a process (re)joining the fleet; creates the key if it is missing.
local s = load()
return finish(s, ADMIT)
