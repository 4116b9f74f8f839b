-- No file access from a model.
local f = io.open("/etc/passwd")
output("y", relu(input("x", f32, { 3 })))
