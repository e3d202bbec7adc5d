//go:build linux || darwin || freebsd || netbsd || openbsd

package demo

import (
	"os"
	"syscall"
	"unsafe"
)

// ttyColumns is the width of the terminal f is attached to (0: unknown), from TIOCGWINSZ.
func ttyColumns(f *os.File) int {
	var ws struct{ Row, Col, X, Y uint16 }
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws))); errno != 0 {
		return 0
	}
	return int(ws.Col)
}
