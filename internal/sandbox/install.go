package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// templateFormat changes whenever installDatadir's arguments change, so a
// cached template made by an older version is not reused.
const templateFormat = "v1"

// portPicker re-picks node ports during a fresh Up when a free port chosen
// earlier was taken by another process before mariadbd could bind it.
type portPicker struct {
	mu   sync.Mutex
	used map[int]bool
}

func (p *portPicker) next() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 10 {
		ports, err := freeLoopbackPorts(1)
		if err != nil {
			return 0, err
		}
		if !p.used[ports[0]] {
			p.used[ports[0]] = true
			return ports[0], nil
		}
	}
	return 0, fmt.Errorf("sandbox: no unused free loopback port found")
}

// bootstrapNode creates node i of a fresh sandbox: defaults file, datadir
// (copied from template when set, else made by mariadb-install-db), start,
// and secureNode. With picker set (free ports), a start that fails because
// another process took the node's port meanwhile is retried on a new port.
func (c *Cluster) bootstrapNode(ctx context.Context, bins binaries, template string, picker *portPicker, i int) error {
	n := &c.Nodes[i]
	osUser, err := currentUser()
	if err != nil {
		return err
	}
	tmpDir := filepath.Join(filepath.Dir(n.DefaultsFile), "tmp")
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return fmt.Errorf("sandbox: %s: create directory: %w", n.Name, err)
	}
	if template != "" {
		if err := copyDir(template, n.DataDir); err != nil {
			return fmt.Errorf("sandbox: %s: copy template datadir %s: %w", n.Name, template, err)
		}
	} else if err := installDatadir(ctx, bins, n.DataDir, tmpDir, osUser); err != nil {
		return fmt.Errorf("sandbox: %s: %w", n.Name, err)
	}
	for attempt := 1; ; attempt++ {
		if err := os.WriteFile(n.DefaultsFile, c.defaultsFile(i, osUser), 0o600); err != nil {
			return fmt.Errorf("sandbox: %s: write defaults file: %w", n.Name, err)
		}
		err := c.startNode(ctx, bins, i, "") // root has no password until secureNode
		if err == nil {
			break
		}
		if picker == nil || attempt == 3 || addrFree(n.Address) || ctx.Err() != nil {
			return err
		}
		port, perr := picker.next()
		if perr != nil {
			return errors.Join(err, perr)
		}
		c.logger().Warn("sandbox: node port taken by another process; retrying on a new port", "node", n.Name, "old_port", n.Port, "port", port)
		n.Port, n.Address = port, loopback(port)
	}
	return c.secureNode(ctx, i)
}

// installDatadir runs mariadb-install-db for datadir without reading any
// option file. root@localhost gets no password (secureNode sets one).
func installDatadir(ctx context.Context, bins binaries, datadir, tmpDir, osUser string) error {
	cmd := exec.CommandContext(ctx, bins.installDB,
		"--no-defaults",
		"--datadir="+datadir,
		"--user="+osUser,
		"--auth-root-authentication-method=normal",
		"--innodb-log-file-size=16M",
		"--skip-test-db",
		"--tmpdir="+tmpDir,
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db failed: %w\n%s", err, tail(out, 2000))
	}
	return nil
}

// ensureTemplate returns the path of a pristine datadir under root made by
// mariadb-install-db for these binaries, creating it if needed. Concurrent
// processes may race: each builds in a private directory and renames it into
// place; the loser discards its copy and uses the winner's.
func ensureTemplate(ctx context.Context, bins binaries, root string) (string, error) {
	osUser, err := currentUser()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", templateFormat, osUser)
	for _, p := range []string{bins.mariadbd, bins.installDB} {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("sandbox: stat %s: %w", p, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, st.Size(), st.ModTime().UnixNano())
	}
	final := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	data := filepath.Join(final, "data")
	if _, err := os.Stat(filepath.Join(final, "READY")); err == nil {
		return data, nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("sandbox: create template cache %s: %w", root, err)
	}
	removeStaleBuilds(root)
	build, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return "", fmt.Errorf("sandbox: create template build directory: %w", err)
	}
	defer os.RemoveAll(build) // no-op once renamed
	tmp := filepath.Join(build, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("sandbox: create template build directory: %w", err)
	}
	if err := installDatadir(ctx, bins, filepath.Join(build, "data"), tmp, osUser); err != nil {
		return "", fmt.Errorf("sandbox: template datadir: %w", err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("sandbox: template datadir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(build, "READY"), []byte(templateFormat+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("sandbox: template datadir: %w", err)
	}
	if err := os.Rename(build, final); err != nil {
		// Another process won the race (final exists and is not empty).
		if _, serr := os.Stat(filepath.Join(final, "READY")); serr == nil {
			return data, nil
		}
		return "", fmt.Errorf("sandbox: install template datadir into %s: %w", final, err)
	}
	return data, nil
}

// removeStaleBuilds removes template builds left by crashed processes (older
// than ten minutes; a build takes about a second).
func removeStaleBuilds(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".build-") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 10*time.Minute {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// copyDir copies the regular files and directories under src to dst,
// keeping permission bits.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return nil // sockets, pipes, links: not part of a pristine datadir
		}
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
