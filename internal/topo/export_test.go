package topo

import "context"

// UpdateSkippingDone is l.Update without the etcd leader's local check of
// Done, so tests can prove the store-side guard alone refuses the write.
func UpdateSkippingDone(ctx context.Context, l Leader, key string, value []byte, expect Version) (Version, error) {
	if el, ok := l.(*etcdLeader); ok {
		return el.guardedUpdate(ctx, key, value, expect)
	}
	return l.Update(ctx, key, value, expect)
}
