-- An admitted request ended: its lease goes, and the tokens it reserved but did not use go
-- back to the bucket (refilled to now first, capped at the limit).
-- KEYS[1]: leases, KEYS[2]: bucket; ARGV: lease member, refund
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREM', KEYS[1], ARGV[1])
local refund = tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[2], 'available', 'at', 'limit')
local avail, at, limit = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
if avail ~= nil and limit ~= nil and limit > 0 then
  avail = math.min(avail + math.max(now - at, 0) * limit / 60 + refund, limit)
  redis.call('HSET', KEYS[2], 'available', string.format('%.6f', avail),
    'at', string.format('%.6f', now))
end
return 0
