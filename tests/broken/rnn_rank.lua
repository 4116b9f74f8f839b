-- a recurrent layer reads a sequence of feature vectors, [T, B, features]: one vector is not one.
local x = input("x", f32, { 2, 3 })
output("y", lstm(x, 6, param("lstm")))
