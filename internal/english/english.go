// Package english words the counts in kprofd's messages.
package english

import "fmt"

// Plural returns n and what, with an s after what unless n is 1:
// "1 round", "3 rounds".
func Plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
