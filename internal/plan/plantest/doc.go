// Package plantest makes probe plans from binaries on disk, for tests
// that need a real plan and no process.
package plantest
