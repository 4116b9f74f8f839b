-- Elementwise chains with numpy broadcasting and every unary and scalar op.
local B = dim("B", 8)
local T = dim("T", 32)
local x = input("x", f32, { B, T, 129 })
local y = input("y", f32, { B, 1, 129 })    -- broadcast over T
local z = input("z", f32, { T, 1 })         -- broadcast over B and the features
local bias = param("bias", { 129 })

local h = relu(x * 0.5 + bias) - y / 3 + z
local pos = h * h + 1                        -- > 0 for log, sqrt, pow
output("chain", sigmoid(h) * tanh(x) + exp(-x) - silu(y))
output("scalars", log(pos) + sqrt(pos) + (2 - h) + 2 / pos + pos ^ 1.5)
output("gelus", gelu(h) + gelu(x, { approx = "tanh" }) - z * y)
