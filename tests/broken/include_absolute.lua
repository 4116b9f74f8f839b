-- include() takes paths relative to the including file.
local lib = include("/etc/passwd")
output("y", lib.block(input("x", f32, { 3 })))
