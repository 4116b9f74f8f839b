-- 3*5 = 15 elements cannot become 4*4 = 16.
local x = input("x", f32, { 3, 5 })
output("y", x:reshape { 4, 4 })
