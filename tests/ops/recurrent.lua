-- The recurrent layers at odd sizes: a 2-layer bidirectional LSTM with
-- initial states (sequence first, PyTorch's default), a 1-layer GRU batch
-- first with an initial state, and a 2-layer GRU without one; every final
-- state is an output too.
local B = dim("B", 4)
local T = dim("T", 5)
local x = input("x", f32, { T, B, 7 })            -- [T, B, features]
local xb = input("xb", f32, { B, T, 7 })          -- batch first
local h0 = input("h0", f32, { 4, B, 6 })          -- [layers * directions, B, hidden]
local c0 = input("c0", f32, { 4, B, 6 })
local g0 = input("g0", f32, { 1, B, 5 })

local y, hn, cn = lstm(x, 6, param("lstm"), { layers = 2, bidirectional = true, h0 = h0, c0 = c0 })
output("lstm_y", y)
output("lstm_hn", hn)
output("lstm_cn", cn)
local gy, ghn = gru(xb, 5, param("gru"), { batch_first = true, h0 = g0 })
output("gru_y", gy)
output("gru_hn", ghn)
local g2y, g2hn = gru(xb, 3, param("gru2"), { layers = 2, batch_first = true })
output("gru2_y", g2y)
output("gru2_hn", g2hn)
