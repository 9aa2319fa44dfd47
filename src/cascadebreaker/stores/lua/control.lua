-- Manual control, fleet-wide. ARGV[4] = 'force_open', 'disable' or 'reset'.
local action = ARGV[4]
local s = load()
if action == 'force_open' then
  s.mode = 'FORCED_OPEN'
  s.open_until = 0
  start_round(s)
  move(s, 'OPEN', 'forced_open')
elseif action == 'disable' then
  s.mode = 'DISABLED'
  close(s, 'disabled')
else
  s.mode = 'NORMAL'
  close(s, 'reset')
end
return finish(s, ADMIT)
