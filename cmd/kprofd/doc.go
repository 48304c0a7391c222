// Command kprofd traces the calls of a running native process below a root
// function and writes their exact calling-context tree.
package main
