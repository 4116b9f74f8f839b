-- Computes something but never calls output().
local x = input("x", f32, { 3 })
local y = relu(x)
