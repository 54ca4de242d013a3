//! A fake Agones SDK server: the calls a relay makes (Ready, Health,
//! Shutdown, GetGameServer, SetLabel, and the beta UpdateCounter) on the
//! SDK's real gRPC paths, over messages written with prost's derive (their
//! fields as Agones' sdk.proto and beta.proto number them), recording
//! what it was told. What tonic's generated server would be, by hand, so
//! the tests need no protoc of their own.

// tonic's Status is what a gRPC method answers with, large or not.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tonic::codegen::{Body, BoxFuture, StdError, empty_body, http};
use tonic::server::{ClientStreamingService, Grpc, NamedService, UnaryService};

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

/// `GameServer`, empty: the SDK only needs an answer to connect.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GameServer {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Counter {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(int64, tag = "2")]
    pub(crate) count: i64,
    #[prost(int64, tag = "3")]
    pub(crate) capacity: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CounterUpdateRequest {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    /// `google.protobuf.Int64Value`.
    #[prost(message, optional, tag = "2")]
    pub(crate) count: Option<i64>,
    #[prost(message, optional, tag = "3")]
    pub(crate) capacity: Option<i64>,
    #[prost(int64, tag = "4")]
    pub(crate) count_diff: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct UpdateCounterRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) counter_update_request: Option<CounterUpdateRequest>,
}

/// What the fake was told.
#[derive(Debug, Default, Clone)]
pub(crate) struct Told {
    pub(crate) ready: u32,
    pub(crate) health: u32,
    pub(crate) shutdown: u32,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) counters: BTreeMap<String, i64>,
    /// Counters refused as undeclared.
    pub(crate) counters_refused: u32,
    /// The order of the lifecycle calls ("ready", "shutdown").
    pub(crate) calls: Vec<&'static str>,
}

/// The fake server's state, shared with the test.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) told: Told,
    /// Whether the `GameServer` declares the counters (else they are
    /// refused, as Agones refuses a counter missing from the spec).
    pub(crate) counters_declared: bool,
}

pub(crate) type Shared = Arc<Mutex<State>>;

/// Starts the fake on a free loopback port in the current runtime.
pub(crate) async fn start(counters_declared: bool) -> (SocketAddr, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let state: Shared = Arc::new(Mutex::new(State {
        counters_declared,
        ..State::default()
    }));
    let sdk = Service::<Sdk>(state.clone(), std::marker::PhantomData);
    let beta = Service::<Beta>(state.clone(), std::marker::PhantomData);
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(sdk)
            .add_service(beta)
            .serve_with_incoming(incoming)
            .await;
    });
    (addr, state)
}

fn told(state: &Shared, f: impl FnOnce(&mut State)) {
    f(&mut state.lock().expect("not poisoned"));
}

/// A unary method: `f` turns the request into the reply.
#[derive(Clone)]
struct Unary<F>(F);

impl<Req, Res, F> UnaryService<Req> for Unary<F>
where
    Req: Send + 'static,
    Res: Send + 'static,
    F: FnMut(Req) -> Result<Res, tonic::Status> + Send + 'static,
{
    type Response = Res;
    type Future = BoxFuture<tonic::Response<Res>, tonic::Status>;
    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        let out = (self.0)(request.into_inner()).map(tonic::Response::new);
        Box::pin(async move { out })
    }
}

/// The streamed Health call: counts each ping as it comes.
struct Health(Shared);

impl ClientStreamingService<Empty> for Health {
    type Response = Empty;
    type Future = BoxFuture<tonic::Response<Empty>, tonic::Status>;
    fn call(&mut self, request: tonic::Request<tonic::Streaming<Empty>>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let mut pings = request.into_inner();
            while let Ok(Some(_)) = pings.message().await {
                told(&state, |s| s.told.health += 1);
            }
            Ok(tonic::Response::new(Empty {}))
        })
    }
}

fn unimplemented() -> http::Response<tonic::body::BoxBody> {
    let mut response = http::Response::new(empty_body());
    let headers = response.headers_mut();
    headers.insert(
        tonic::Status::GRPC_STATUS,
        (tonic::Code::Unimplemented as i32).into(),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}

/// Runs unary method `f` on `req`.
fn unary<Req, Res, B>(
    req: http::Request<B>,
    f: impl FnMut(Req) -> Result<Res, tonic::Status> + Send + 'static,
) -> BoxFuture<http::Response<tonic::body::BoxBody>, Infallible>
where
    Req: prost::Message + Default + Send + 'static,
    Res: prost::Message + Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = Grpc::new(tonic::codec::ProstCodec::<Res, Req>::default());
        Ok(grpc.unary(Unary(f), req).await)
    })
}

/// The methods of one gRPC service, by path.
trait Methods: Send + Sync + 'static {
    const NAME: &'static str;
    fn route<B>(
        state: Shared,
        req: http::Request<B>,
    ) -> BoxFuture<http::Response<tonic::body::BoxBody>, Infallible>
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static;
}

/// A gRPC service answering with `M`'s methods.
struct Service<M>(Shared, std::marker::PhantomData<M>);

impl<M> Clone for Service<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone(), std::marker::PhantomData)
    }
}

impl<M: Methods> NamedService for Service<M> {
    const NAME: &'static str = M::NAME;
}

impl<M: Methods, B> tonic::codegen::Service<http::Request<B>> for Service<M>
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        M::route(self.0.clone(), req)
    }
}

/// `agones.dev.sdk.SDK`.
struct Sdk;

impl Methods for Sdk {
    const NAME: &'static str = "agones.dev.sdk.SDK";

    fn route<B>(
        state: Shared,
        req: http::Request<B>,
    ) -> BoxFuture<http::Response<tonic::body::BoxBody>, Infallible>
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        match req.uri().path() {
            "/agones.dev.sdk.SDK/GetGameServer" => unary(req, |_: Empty| Ok(GameServer {})),
            "/agones.dev.sdk.SDK/Ready" => unary(req, move |_: Empty| {
                told(&state, |s| {
                    s.told.ready += 1;
                    s.told.calls.push("ready");
                });
                Ok(Empty {})
            }),
            "/agones.dev.sdk.SDK/Shutdown" => unary(req, move |_: Empty| {
                told(&state, |s| {
                    s.told.shutdown += 1;
                    s.told.calls.push("shutdown");
                });
                Ok(Empty {})
            }),
            "/agones.dev.sdk.SDK/SetLabel" => unary(req, move |kv: KeyValue| {
                told(&state, |s| {
                    s.told.labels.insert(kv.key, kv.value);
                });
                Ok(Empty {})
            }),
            "/agones.dev.sdk.SDK/Health" => Box::pin(async move {
                let mut grpc = Grpc::new(tonic::codec::ProstCodec::<Empty, Empty>::default());
                Ok(grpc.client_streaming(Health(state), req).await)
            }),
            _ => Box::pin(async move { Ok(unimplemented()) }),
        }
    }
}

/// `agones.dev.sdk.beta.SDK`: Counters.
struct Beta;

impl Methods for Beta {
    const NAME: &'static str = "agones.dev.sdk.beta.SDK";

    fn route<B>(
        state: Shared,
        req: http::Request<B>,
    ) -> BoxFuture<http::Response<tonic::body::BoxBody>, Infallible>
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        match req.uri().path() {
            "/agones.dev.sdk.beta.SDK/UpdateCounter" => {
                unary(req, move |r: UpdateCounterRequest| {
                    let u = r.counter_update_request.unwrap_or_default();
                    let mut s = state.lock().expect("not poisoned");
                    if !s.counters_declared {
                        s.told.counters_refused += 1;
                        return Err(tonic::Status::not_found(format!(
                            "counter not found: {}",
                            u.name
                        )));
                    }
                    let count = u.count.unwrap_or_default();
                    s.told.counters.insert(u.name.clone(), count);
                    Ok(Counter {
                        name: u.name,
                        count,
                        capacity: 1000,
                    })
                })
            }
            _ => Box::pin(async move { Ok(unimplemented()) }),
        }
    }
}
