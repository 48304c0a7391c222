module gotarget

go 1.22
