-- rope's positions are one per time step: [T] or [B, T], not [T + 1].
local x = input("x", f32, { 2, 4, 5, 8 })
local pos = input("pos", i32, { 6 })
output("y", rope(x, pos))
