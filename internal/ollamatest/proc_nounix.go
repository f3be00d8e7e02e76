//go:build !unix

package ollamatest

import (
	"os"
	"syscall"
)

// procAttr has nothing to set where there are no process groups.
func procAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills the server process (without process groups its runners may survive).
func signalGroup(pid int, _ bool) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
