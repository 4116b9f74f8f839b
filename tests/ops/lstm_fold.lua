-- LSTMs whose scans take their input projections (the C SIMD target folds
-- x_t W_ih^T into each step's GEMM): two layers sequence first with initial
-- states at odd sizes (hidden 13, 5 features), and a bidirectional layer
-- batch first, whose reverse scan folds too when hfuse leaves the two
-- directions' projections apart (nnc --no-hfuse).
local B = dim("B", 4)
local T = dim("T", 6)
local x = input("x", f32, { T, B, 5 })            -- [T, B, features]
local xb = input("xb", f32, { B, T, 7 })          -- batch first
local h0 = input("h0", f32, { 2, B, 13 })
local c0 = input("c0", f32, { 2, B, 13 })

local y, hn, cn = lstm(x, 13, param("deep"), { layers = 2, h0 = h0, c0 = c0 })
output("deep_y", y)
output("deep_hn", hn)
output("deep_cn", cn)
local by, bhn, bcn = lstm(xb, 6, param("bi"), { bidirectional = true, batch_first = true })
output("bi_y", by)
output("bi_hn", bhn)
output("bi_cn", bcn)
