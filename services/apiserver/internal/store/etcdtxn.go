package store

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The store's write transactions (create, update, delete and the values
// they claim) are built as etcd's own request messages and sent through
// etcd's KV API. clientv3's Txn builder sends the same request, but
// copies every comparison twice by reflection (in Compare and again in
// Txn.If) and converts every operation once more: 3% of a pod Create's
// CPU and 1.7 KB of its garbage (BenchmarkCreateThroughput).

// kvOf returns etcd's KV API for cli: kv when given (an in-process client
// has no connection: its backend passes the KV it wraps), else the
// client's connection, which carries clientv3's retry and authentication
// interceptors.
func kvOf(cli *clientv3.Client, kv pb.KVClient) pb.KVClient {
	if kv != nil {
		return kv
	}
	conn := cli.ActiveConnection()
	if conn == nil {
		panic("store: an etcd client without a connection (in process) needs Options.KV")
	}
	return readyKV{pb.NewKVClient(conn)}
}

// readyKV waits for a ready connection, as clientv3's calls do, rather
// than failing at once while the client reconnects.
type readyKV struct{ pb.KVClient }

func (k readyKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	return k.KVClient.Txn(ctx, in, append(opts, grpc.WaitForReady(true))...)
}

// createdIs compares key's create revision with rev (0: the key is absent).
func createdIs(key string, result pb.Compare_CompareResult, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: result,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// noneUnder holds when no key starts with prefix.
func noneUnder(prefix string) *pb.Compare {
	c := createdIs(prefix, pb.Compare_EQUAL, 0)
	c.RangeEnd = []byte(clientv3.GetPrefixRangeEnd(prefix))
	return c
}

// modifiedAt holds when key was last written at rev.
func modifiedAt(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// valueIs holds when key's value is value.
func valueIs(key, value string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_Value{Value: []byte(value)}}
}

// opPut writes value at key, attached to lease unless it is 0.
func opPut(key string, value []byte, lease clientv3.LeaseID) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value, Lease: int64(lease)}}}
}

// opCount reads whether key exists (its count).
func opCount(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key), CountOnly: true}}}
}

// opDelete deletes key.
func opDelete(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

// opDeleteUnder deletes every key starting with prefix.
func opDeleteUnder(prefix string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(prefix),
		RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix))}}}
}

// opIf is a nested transaction: then runs only when every cmp holds.
func opIf(cmps []*pb.Compare, then ...*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then}}}
}

// keyWritten is the key a put or delete writes ("" for a read or a
// nested transaction, whose writes are conditional).
func keyWritten(op *pb.RequestOp) []byte {
	switch r := op.Request.(type) {
	case *pb.RequestOp_RequestPut:
		return r.RequestPut.Key
	case *pb.RequestOp_RequestDeleteRange:
		return r.RequestDeleteRange.Key
	}
	return nil
}
