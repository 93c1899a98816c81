package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dataDirLockName is the lock and pid file `switchyard up` keeps in the
// embedded etcd's data directory while it runs.
const dataDirLockName = "switchyard.pid"

// dataDirLock is the exclusive hold of one `switchyard up` on an embedded
// etcd data directory: an flock(2) on <data_dir>/switchyard.pid, which holds
// the process id. etcd itself locks its database file with a blocking flock
// (bbolt), so a second process on the same directory would otherwise wait
// forever, silently, without reacting to SIGINT/SIGTERM.
type dataDirLock struct {
	f *os.File
}

// lockDataDir takes the data directory lock without blocking. When another
// process holds it the error names the lock file and, when the file says,
// the pid holding it. When the pid file is free but etcd's own database
// file is locked (a process that does not write the pid file), the error
// names that file. The directory is created (0700) if missing.
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd.embedded.data_dir: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("etcd.embedded.data_dir: open lock file %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("etcd.embedded.data_dir: lock %s: %w", path, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, fmt.Errorf("etcd.embedded.data_dir %s is in use: lock file %s is held by %s (another `switchyard up` on this data directory?); stop it, or give this one its own etcd.embedded.data_dir",
			dir, path, holder)
	}
	// etcd's database file: locked by a process that predates the pid file.
	db := filepath.Join(dir, "member", "snap", "db")
	if dbf, err := os.OpenFile(db, os.O_RDWR, 0); err == nil {
		lerr := unix.Flock(int(dbf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if lerr == nil {
			_ = unix.Flock(int(dbf.Fd()), unix.LOCK_UN)
		}
		dbf.Close()
		if errors.Is(lerr, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("etcd.embedded.data_dir %s is in use: etcd's database file %s is locked by another process; stop it, or give this one its own etcd.embedded.data_dir", dir, db)
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// Close releases the lock and empties the pid file (the file stays: removing
// it would let a process that opened it before the removal lock an unlinked
// file while a third one locks a new one).
func (l *dataDirLock) Close() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close()
	l.f = nil
}
