package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/sandbox"
)

func newSandboxCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Local MariaDB GTID replication cluster on loopback for trying Switchyard",
		Long: `sandbox starts, inspects and stops a local MariaDB replication cluster:
N mariadbd processes on 127.0.0.1, node1 the primary, the others replicating
with MASTER_USE_GTID=slave_pos and read_only=ON, an application user "app"
(no SUPER, no READ_ONLY ADMIN, so read_only fences it), a monitor user and a
replication user, and a ready switchyard.yaml in the sandbox directory.
A new sandbox also gets a random integrity key (integrity.key, mode 0600,
beside switchyard.yaml and never stored in etcd) named as
etcd.integrity_key_file, so config revisions, cluster states and operator
requests in etcd are signed and a hand-written value is refused.
Needs the Debian package mariadb-server.`,
	}
	var dir string
	cmd.PersistentFlags().StringVar(&dir, "dir", ".sandbox", "sandbox directory")

	var o sandbox.Options
	up := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox (idempotent: restarts stopped nodes of an existing one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			o.Dir = dir
			o.Log = log
			o.IntegrityKey = true
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			c, err := sandbox.Up(ctx, o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "sandbox ready in %s (%.1fs): %d nodes\n", c.Dir, time.Since(start).Seconds(), len(c.Nodes))
			// The roles as the nodes report them now (switchovers move the
			// primary; the sandbox's creation order says nothing).
			nodes := c.Status(ctx)
			for _, n := range nodes {
				fmt.Fprintf(w, "  %s  %s  server_id=%d  %s\n", n.Name, n.Address, n.ServerID, sandboxRole(n, nodes))
			}
			fmt.Fprintf(w, "config: %s\n", c.ConfigPath)
			fmt.Fprintf(w, "next:   switchyard up --config %s\n", c.ConfigPath)
			return nil
		},
	}
	up.Flags().IntVar(&o.Nodes, "nodes", 0, "number of mariadbd nodes (default 3 for a new sandbox; an existing one keeps its count)")
	up.Flags().IntVar(&o.BasePort, "base-port", 0, "port of node1 (node N gets base-port+N-1); 0 picks free ports")
	up.Flags().BoolVar(&o.SemiSync, "semi-sync", false, "enable semi-synchronous replication (AFTER_SYNC)")
	up.Flags().StringVar(&o.ListenerRW, "rw-address", "", "rw listener address written to switchyard.yaml (default 127.0.0.1:6446, or a free port if busy)")
	up.Flags().StringVar(&o.ListenerRO, "ro-address", "", "ro listener address (default 127.0.0.1:6447, or a free port if busy)")
	up.Flags().StringVar(&o.AdminAddress, "admin-address", "", "admin HTTP address (default 127.0.0.1:8080, or a free port if busy)")
	up.Flags().StringVar(&o.EtcdClientAddress, "etcd-client-address", "", "embedded etcd client address (default 127.0.0.1:2379, or a free port if busy)")
	up.Flags().StringVar(&o.EtcdPeerAddress, "etcd-peer-address", "", "embedded etcd peer address (default 127.0.0.1:2380, or a free port if busy)")

	var purge bool
	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the sandbox's mariadbd processes (only those it started, by pid)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if err := sandbox.Down(ctx, dir, purge); err != nil {
				return err
			}
			if purge {
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s stopped and removed\n", dir)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s stopped (data kept; --purge removes it)\n", dir)
			}
			return nil
		},
	}
	down.Flags().BoolVar(&purge, "purge", false, "also remove the sandbox directory and its data")

	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each sandbox node: process, read_only, replication, GTID position",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Load(dir)
			if err != nil {
				return err
			}
			ss := c.Status(cmd.Context())
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(ss)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tADDRESS\tPID\tREAD_ONLY\tSOURCE\tIO/SQL\tLAG\tGTID_CURRENT_POS\tERROR")
			for _, s := range ss {
				pid, ro, src, threads, lag := "-", "-", "-", "-", "-"
				if s.Running {
					pid = fmt.Sprint(s.PID)
				}
				if s.Reachable {
					ro = fmt.Sprint(s.ReadOnly)
				}
				if s.ReplicatingFrom != "" {
					src = s.ReplicatingFrom
					if s.SourceNode != "" {
						src = s.SourceNode
					}
					threads = s.IORunning + "/" + s.SQLRunning
					lag = "NULL"
					if s.SecondsBehind >= 0 {
						lag = fmt.Sprintf("%ds", s.SecondsBehind)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Address, pid, ro, src, threads, lag, s.GTIDCurrentPos, s.Error)
			}
			return tw.Flush()
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	env := &cobra.Command{
		Use:   "env",
		Short: "Print shell exports for the sandbox (config path, listener addresses, application user)",
		Long: `env prints lines for eval in a shell:
  SWITCHYARD_CONFIG, SWITCHYARD_RW, SWITCHYARD_RO, SWITCHYARD_ADMIN,
  SWITCHYARD_PRIMARY (the node that is writable and not replicating now),
  SWITCHYARD_APP_USER, SWITCHYARD_APP_PASSWORD,
  SWITCHYARD_TLS_CA (the sandbox CA that signs the certificate of the nodes
  and the listeners; "" for a sandbox made without one).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Load(dir)
			if err != nil {
				return err
			}
			// The primary is whichever node is writable and not replicating
			// now (a switchover moves it); node1 when none is.
			primary := c.Nodes[0].Address
			for _, ns := range c.Status(cmd.Context()) {
				if ns.Reachable && !ns.ReadOnly && ns.ReplicatingFrom == "" {
					primary = ns.Address
					break
				}
			}
			w := cmd.OutOrStdout()
			ca := c.TLS().CA
			if _, err := os.Stat(ca); err != nil {
				ca = ""
			}
			for _, kv := range [][2]string{
				{"SWITCHYARD_CONFIG", c.ConfigPath},
				{"SWITCHYARD_RW", c.ListenerRW},
				{"SWITCHYARD_RO", c.ListenerRO},
				{"SWITCHYARD_ADMIN", c.AdminAddress},
				{"SWITCHYARD_PRIMARY", primary},
				{"SWITCHYARD_APP_USER", c.AppUser},
				{"SWITCHYARD_APP_PASSWORD", c.AppPassword},
				{"SWITCHYARD_TLS_CA", ca},
			} {
				fmt.Fprintf(w, "export %s='%s'\n", kv[0], kv[1])
			}
			return nil
		},
	}
	cmd.AddCommand(up, down, status, env)
	return cmd
}

// sandboxRole describes a node's role from its status: "primary" (writable,
// no replication source), "replica of NODE", or what is wrong; all are
// the statuses of every node (whether another one is the primary).
func sandboxRole(n sandbox.NodeStatus, all []sandbox.NodeStatus) string {
	switch {
	case !n.Reachable || n.Error != "":
		return "NOT ANSWERING: " + n.Error
	case n.ReplicatingFrom != "" && n.SourceNode != "":
		role := "replica of " + n.SourceNode
		if !n.ReadOnly {
			role += " (WRITABLE: read_only=OFF on a replica)"
		}
		return role
	case n.ReplicatingFrom != "":
		return "replica of " + n.ReplicatingFrom
	case n.ReadOnly:
		for _, o := range all {
			if o.Name != n.Name && o.Reachable && o.Error == "" && !o.ReadOnly && o.ReplicatingFrom == "" {
				return "read-only and not replicating (primary is " + o.Name + ": a fenced old primary, which the controller repoints, or quarantines when it holds transactions the primary lacks)"
			}
		}
		return "read-only and not replicating (no primary: writes are refused until one is made writable)"
	default:
		return "primary"
	}
}
