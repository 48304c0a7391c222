// Package proc reads what kprofd needs about a live process from /proc.
package proc
