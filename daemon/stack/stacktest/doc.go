// Package stacktest holds the functions, events and renderings that the
// tests of the stack simulator and of what observes it share.
package stacktest
