module gotarget

go 1.26
