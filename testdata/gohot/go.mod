module gohot

go 1.22
