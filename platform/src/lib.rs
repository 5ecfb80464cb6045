//! What bosun's processes need from the machine and the network, below every other bosun
//! crate (the binary, the sandbox): HTTP/1 listeners that close slow clients as
//! kube-apiserver does ([`serve`]).

pub mod serve;
