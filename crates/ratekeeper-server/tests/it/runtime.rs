//! The runtime `ratekeeper serve` runs on: sized by the CPUs the process
//! may use, not the machine's, and exact under many concurrent gRPC
//! clients on it.
//!
//! The processes are started under `taskset` (util-linux) to restrict
//! their affinity mask as a container's cpuset would.

use crate::common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use common::ServeProcess;
use ratekeeper_server::config::available_cpus;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};

/// `ratekeeper serve ARGS` on CPUs `cpus` (a taskset list such as "0"),
/// with `env`, on free loopback ports.
fn serve_on(cpus: &str, args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
    ServeProcess::start_under(&["taskset", "-c", cpus], args, env)
}

/// The banner's runtime line.
fn runtime_line(process: &ServeProcess) -> &str {
    process
        .banner
        .iter()
        .find(|line| line.starts_with("runtime "))
        .unwrap_or_else(|| panic!("no runtime line in {:?}", process.banner))
}

/// This test process's CPUs as a taskset list ("0,1"), the first `n`.
fn first_cpus(n: usize) -> String {
    // The CPUs of this process's mask are not always 0..n (a CI runner's
    // cpuset may start anywhere): ask taskset for the mask.
    let out = Command::new("taskset")
        .args(["-pc", &std::process::id().to_string()])
        .output()
        .expect("taskset runs (util-linux)");
    let text = String::from_utf8(out.stdout).unwrap();
    let list = text.rsplit(':').next().unwrap().trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse::<usize>().unwrap()),
        }
    }
    assert!(cpus.len() >= n, "{n} CPUs wanted, the mask is {list}");
    cpus[..n]
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_worker_threads_follow_a_restricted_affinity_mask() {
    let one = serve_on(&first_cpus(1), &[], &[]);
    assert_eq!(
        runtime_line(&one),
        "runtime 1 worker thread (auto: 1 CPU available)"
    );
    drop(one);

    // The whole mask, when this machine has more than one CPU.
    let all = available_cpus();
    if all >= 2 {
        let two = serve_on(&first_cpus(2), &[], &[]);
        assert_eq!(
            runtime_line(&two),
            "runtime 2 worker threads (auto: 2 CPUs available)"
        );
    }

    // A number set in the file (here by its variable) stands, whatever
    // the mask.
    let set = serve_on(
        &first_cpus(1),
        &[],
        &[("RATEKEEPER_RUNTIME__WORKER_THREADS", "3")],
    );
    assert_eq!(
        runtime_line(&set),
        "runtime 3 worker threads (runtime.worker_threads; 1 CPU available)"
    );
}

/// 64 clients, each on its own connection, ask at once for the same few
/// keys, more often than their quota: every key is allowed exactly its
/// quota, on one CPU and on all of them. (A day's quota: a slow machine
/// taking seconds over the calls earns no more.)
#[tokio::test]
async fn decisions_stay_exact_under_64_concurrent_grpc_clients() {
    const CLIENTS: usize = 64;
    const CALLS: usize = 40;
    const KEYS: usize = 4;
    const QUOTA: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        format!(
            "[[limits]]\nname = \"users\"\nrate = \"{QUOTA}/day\"\npolicy = \"gcra\"\n\
             key = [\"descriptor:user\"]\n[limits.match]\ndomain = \"exact\"\n\
             descriptors = [{{ key = \"user\" }}]\n"
        ),
    )
    .unwrap();
    let masks = [first_cpus(1), first_cpus(available_cpus())];
    for cpus in masks {
        let process = serve_on(&cpus, &["--config", path.to_str().unwrap()], &[]);
        let url = format!("http://{}", process.grpc.unwrap());
        let allowed = Arc::new(std::sync::Mutex::new(HashMap::<usize, usize>::new()));
        let mut clients = Vec::new();
        for client in 0..CLIENTS {
            let channel = tonic::transport::Channel::from_shared(url.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let allowed = Arc::clone(&allowed);
            clients.push(tokio::spawn(async move {
                let mut rls = RateLimitServiceClient::new(channel);
                for call in 0..CALLS {
                    let key = (client + call) % KEYS;
                    let request = RateLimitRequest {
                        domain: "exact".to_owned(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "user".to_owned(),
                                value: format!("u{key}"),
                            }],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 0,
                    };
                    let answer = rls.should_rate_limit(request).await.unwrap().into_inner();
                    assert_eq!(answer.statuses.len(), 1);
                    let code = answer.overall_code;
                    assert_eq!(answer.statuses[0].code, code);
                    if code == Code::Ok as i32 {
                        *allowed.lock().unwrap().entry(key).or_default() += 1;
                    } else {
                        assert_eq!(code, Code::OverLimit as i32);
                    }
                }
            }));
        }
        for client in clients {
            client.await.unwrap();
        }
        let allowed = allowed.lock().unwrap().clone();
        // 64 × 40 calls over 4 keys: 640 asks of each, for a quota of 300.
        let expected: HashMap<usize, usize> = (0..KEYS).map(|key| (key, QUOTA)).collect();
        assert_eq!(allowed, expected, "on CPUs {cpus}");
    }
}
