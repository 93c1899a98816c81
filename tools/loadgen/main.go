// Command switchyard-loadgen drives the ledger workload of package loadgen
// through Switchyard's rw and ro listeners and prints what the clients saw:
// queries, errors by MySQL error number, which server executed writes and
// answered reads, the longest write pause, and whether every acknowledged
// write is present afterwards.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/loadgen"
)

func main() {
	var (
		rwAddr   = flag.String("rw", "127.0.0.1:6446", "rw listener host:port")
		roAddr   = flag.String("ro", "127.0.0.1:6447", "ro listener host:port (empty: no readers)")
		user     = flag.String("user", "app", "application user")
		password = flag.String("password", os.Getenv("SWITCHYARD_APP_PASSWORD"), "application password (default $SWITCHYARD_APP_PASSWORD)")
		db       = flag.String("db", "sbtest", "database holding the ledger table")
		duration = flag.Duration("duration", 10*time.Second, "how long to run")
		writers  = flag.Int("writers", 4, "concurrent writers (rw listener)")
		readers  = flag.Int("readers", 4, "concurrent readers (ro listener)")
		label    = flag.String("label", "run", "label printed before the figures")
		names    = flag.String("names", "", "server_id=name pairs for the report, e.g. 1=node1,2=node2")
		check    = flag.Bool("check", true, "after the run, verify through the rw listener that every acknowledged write is present")
	)
	flag.Parse()
	// The driver logs every connection the proxy closed; the report counts them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dsn := func(addr string) string {
		return fmt.Sprintf("%s:%s@tcp(%s)/%s?timeout=2s&readTimeout=30s&writeTimeout=30s", *user, *password, addr, *db)
	}
	ctx := context.Background()
	if err := loadgen.Setup(ctx, dsn(*rwAddr), ""); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	o := loadgen.Options{RW: dsn(*rwAddr), Writers: *writers, Readers: *readers, IDBase: time.Now().UnixNano() / 1000 * 1000 % (1 << 50)}
	if *roAddr != "" {
		o.RO = dsn(*roAddr)
	}
	rctx, cancel := context.WithTimeout(ctx, *duration)
	res, err := loadgen.Run(rctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	res.Print(os.Stdout, *label, parseNames(*names))
	if *check {
		missing, err := loadgen.Check(ctx, dsn(*rwAddr), "", res.Acked)
		switch {
		case err != nil:
			fmt.Printf("%-10s ledger check failed: %v\n", "", err)
			os.Exit(1)
		case len(missing) > 0:
			fmt.Printf("%-10s LOST %d acknowledged writes (first id %d)\n", "", len(missing), missing[0])
			os.Exit(1)
		default:
			fmt.Printf("%-10s ledger check: all %d acknowledged writes present on the current primary\n", "", len(res.Acked))
		}
	}
	if res.Errors() > 0 {
		os.Exit(3)
	}
}

func parseNames(s string) map[int64]string {
	m := map[int64]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if id, err := strconv.ParseInt(k, 10, 64); err == nil {
			m[id] = v
		}
	}
	return m
}
