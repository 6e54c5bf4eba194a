# Sourced by bench-floor.sh and callgrind-floor.sh: free ports, waiting
# for a server, and the configuration both measure ratekeeper with.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 60 s (a server under valgrind starts slowly).
wait_port() { for _ in $(seq 1200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

# Writes FILE: the gRPC door on PORT alone, one fixed-window limit per
# value of the descriptor `user` in domain `bench`, as rlsload asks.
write_bench_config() {
  cat >"$1" <<TOML
[listen]
http = "off"
grpc = "127.0.0.1:$2"
admin = "off"
[[limits]]
name = "per-user"
policy = "fixed_window"
rate = "1000000/minute"
key = ["descriptor:user"]
match = { domain = "bench", descriptors = [{ key = "user" }] }
TOML
}
