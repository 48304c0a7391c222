module goformat

go 1.22
