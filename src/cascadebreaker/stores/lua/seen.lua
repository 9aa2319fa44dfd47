-- An instance made calls through this breaker recently (the fleet quorum's denominator).
-- ARGV[4] = instance id.
local s = load()
if s.fresh then s.dirty = false else seen_now(ARGV[4]) end  -- never creates the key
return finish(s, ADMIT)
