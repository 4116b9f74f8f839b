-- Only one dim of a reshape can be inferred.
local x = input("x", f32, { 3, 5, 7 })
output("y", x:reshape { -1, -1 })
