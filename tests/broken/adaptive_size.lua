-- adaptive_avgpool2d to 4 x 4 of a 9 x 9 image: 4 does not divide 9.
local x = input("x", f32, { 2, 3, 9, 9 })
output("y", adaptive_avgpool2d(x, 4))
