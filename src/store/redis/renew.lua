-- A live replica extends its leases of one tenant; leases already expired stay gone.
-- KEYS[1]: leases; ARGV[1]: ttl (seconds), ARGV[2..]: members
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', 'GT', now + ttl, ARGV[i])
end
redis.call('EXPIRE', KEYS[1], math.ceil(ttl) * 2)
return 0
