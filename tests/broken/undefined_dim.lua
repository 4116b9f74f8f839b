-- "N" was never declared (dim("N", max) or "N<=max" declare it).
local x = input("x", f32, { "N", 4 })
output("y", relu(x))
