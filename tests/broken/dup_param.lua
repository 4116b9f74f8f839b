-- The same parameter name twice with different shapes.
local x = input("x", f32, { 2, 3 })
local w1 = param("w", { 3, 4 })
local w2 = param("w", { 4, 3 })
output("y", matmul(matmul(x, w1), w2))
