-- Loaded with -D layers=two: "layers" is a number.
local cfg = config { layers = 2, width = 5 }
local x = input("x", f32, { cfg.width })
for _ = 1, cfg.layers do x = relu(x) end
output("y", x)
