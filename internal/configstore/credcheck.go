package configstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
)

// RuleCredentialsRefused: the new config's credentials.monitor account is
// refused (access denied) by a cluster's primary: every probe of the
// controller and every failsafe check of the proxies would fail with it.
const RuleCredentialsRefused = "credentials-refused"

// credentialCheckTimeout bounds one login of the check.
const credentialCheckTimeout = 2 * time.Second

// checkCredentials logs in, with next's credentials.monitor account, to
// the live primary of each cluster when that account changed from cur's,
// and returns a violation for each primary that refuses it (MySQL error
// 1045 or 1044: access denied). Anything else — a node this host cannot
// reach, a secret that does not resolve here — proves nothing and is not a
// violation: the account is then checked by its first probe, as before.
func checkCredentials(ctx context.Context, cur, next *config.Config, live config.Live) []config.Violation {
	if cur == nil || next == nil || cur.Credentials.Monitor == next.Credentials.Monitor {
		return nil
	}
	cred := next.Credentials.Monitor
	pass, err := cred.Resolve()
	if err != nil {
		return nil
	}
	var out []config.Violation
	for _, cl := range next.Clusters {
		lc, ok := live.Clusters[cl.Name]
		if !ok || lc.Primary == "" {
			continue
		}
		n := cl.Node(lc.Primary)
		if n == nil {
			continue
		}
		mc := mysql.NewConfig()
		mc.User, mc.Passwd, mc.Net, mc.Addr = cred.User, pass, "tcp", n.Address
		mc.Timeout, mc.ReadTimeout, mc.WriteTimeout = credentialCheckTimeout, credentialCheckTimeout, credentialCheckTimeout
		mc.TLSConfig = "preferred"
		mc.AllowNativePasswords = true
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, credentialCheckTimeout)
		c, err := conn.Connect(cctx)
		cancel()
		if err == nil {
			_ = c.Close()
			continue
		}
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1045 || me.Number == 1044) {
			out = append(out, config.Violation{Rule: RuleCredentialsRefused, Subject: "credentials.monitor",
				Msg: fmt.Sprintf("the new credentials.monitor (user %q) is refused by primary %s of cluster %s (%s): %v; every probe and failsafe check would fail: replicas would leave the replica listeners, switchovers and failovers would be refused; fix the account or its secret",
					cred.User, n.Name, cl.Name, n.Address, err)})
		}
	}
	return out
}
