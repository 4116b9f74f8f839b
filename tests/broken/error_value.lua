-- error() with a table instead of a message.
local x = input("x", f32, { 3 })
error({ code = 3 })
