// Package atomicfile writes a file whole or not at all, without following
// links another user may have planted: the data goes to a new file of a
// random name beside the target, created with O_EXCL|O_NOFOLLOW, is
// synced, and is renamed over the target (rename replaces a link at the
// target's name, it does not write through it).
package atomicfile
