//go:build unix && !linux

package ollamatest

import "syscall"

// procAttr puts the server in its own process group, so that Stop reaches its runners.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGTERM (or SIGKILL) to the process group led by pid.
func signalGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig) // the group may be gone already
}
