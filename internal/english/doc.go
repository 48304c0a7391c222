// Package english words the counts in kprofd's messages.
package english
