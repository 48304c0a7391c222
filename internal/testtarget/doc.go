// Package testtarget builds the target programs under testdata/ and drives
// them, for kprofd's tests.
package testtarget
