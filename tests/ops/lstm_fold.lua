-- LSTMs whose scans take their input projections (the C SIMD target folds
-- x_t W_ih^T into each step's GEMM): two layers sequence first with initial
-- states at odd sizes (hidden 13, 5 features), and a bidirectional layer
-- batch first, whose reverse scan folds too when hfuse leaves the two
-- directions' projections apart (nnc --hfuse=off). -D makes them large
-- enough for a scan's tasks, its rows read in place and K in two passes.
local cfg = config {
  batch = 4,
  steps = 6,
  features = 5,
  hidden = 13,
  bi_features = 7,
  bi_hidden = 6,
}
local B = dim("B", cfg.batch)
local T = dim("T", cfg.steps)
local x = input("x", f32, { T, B, cfg.features })        -- [T, B, features]
local xb = input("xb", f32, { B, T, cfg.bi_features })   -- batch first
local h0 = input("h0", f32, { 2, B, cfg.hidden })
local c0 = input("c0", f32, { 2, B, cfg.hidden })

local y, hn, cn = lstm(x, cfg.hidden, param("deep"), { layers = 2, h0 = h0, c0 = c0 })
output("deep_y", y)
output("deep_hn", hn)
output("deep_cn", cn)
local by, bhn, bcn = lstm(xb, cfg.bi_hidden, param("bi"), { bidirectional = true, batch_first = true })
output("bi_y", by)
output("bi_hn", bhn)
output("bi_cn", bcn)
