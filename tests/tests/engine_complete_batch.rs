//! `CompleteBatch` (issue 8): several completions in one gRPC call, each answered exactly as its own `Complete`
//! would be, through the real orchestrator and store on every available backend.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{
    Attempt, CompleteBatchRequest, CompleteRequest, PollRequest, ReportOutcome, ReportResponse, complete_result,
};
use cairn_tests::http::{HttpApp, step};
use serde_json::json;
use tonic::Code;

const START: &str = "2027-03-14T12:00:00Z";

fn completion(attempt: &Attempt, output_json: &str) -> CompleteRequest {
    CompleteRequest {
        // Ignored in a batch: the batch's worker id is used.
        worker_id: "someone else".into(),
        lease: attempt.lease.clone(),
        output_json: output_json.into(),
        next_max_attempts: 1,
        next_actions: vec!["noop".into()],
    }
}

fn response(result: &cairn_proto::v1::CompleteResult) -> &ReportResponse {
    match &result.result {
        Some(complete_result::Result::Response(response)) => response,
        other => panic!("a response, not {other:?}"),
    }
}

fn next_step(response: &ReportResponse) -> Vec<&str> {
    response.next.iter().map(|a| a.lease.as_ref().map_or("", |l| l.step_id.as_str())).collect()
}

#[tokio::test]
async fn a_batch_answers_each_completion_as_its_own_call_would() {
    for backend in cairn_tests::backends() {
        let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
        let run = app
            .submit(json!({"steps":[
                {"id":"a","action":"noop","args":{}},
                {"id":"b","action":"noop","args":{}},
                {"id":"a2","action":"noop","args":{},"depends_on":["a"],"idempotent":false},
                {"id":"b2","action":"noop","args":{},"depends_on":["b"],"idempotent":false}
            ]}))
            .await;
        let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
        let poll = PollRequest { worker_id: "w1".into(), actions: vec!["noop".into()], max_attempts: 2, wait_ms: 1000 };
        let first = worker.poll(poll).await.unwrap().into_inner().attempts;
        assert_eq!(first.len(), 2, "{backend:?}: a and b");
        let batch = CompleteBatchRequest {
            worker_id: "w1".into(),
            items: vec![
                completion(&first[0], "{}"),
                completion(&first[1], r#"{"n":1}"#),
                completion(&first[0], "{oops"),
            ],
        };

        let answer = worker.complete_batch(batch.clone()).await.unwrap().into_inner();

        assert_eq!(answer.results.len(), 3, "{backend:?}: one result per item, in order");
        let (one, two) = (response(&answer.results[0]), response(&answer.results[1]));
        assert_eq!((one.outcome(), two.outcome()), (ReportOutcome::Succeeded, ReportOutcome::Succeeded), "{backend:?}");
        let mut handed = [next_step(one), next_step(two)].concat();
        handed.sort_unstable();
        assert_eq!(handed, ["a2", "b2"], "{backend:?}: each item's claim got one of the released dependents");
        match &answer.results[2].result {
            Some(complete_result::Result::Error(e)) => {
                assert_eq!(Code::from(e.code), Code::InvalidArgument, "{backend:?}: {e:?}");
                assert!(e.message.contains("output_json"), "{backend:?}: says what was wrong: {e:?}");
            }
            other => panic!("{backend:?}: the malformed item fails alone, not {other:?}"),
        }
        let view = app.run(&run).await;
        assert_eq!(step(&view, "a")["status"], "succeeded", "{backend:?}");
        assert_eq!(step(&view, "b")["output"], json!({"n": 1}), "{backend:?}: each item's own output");
        assert_eq!(step(&view, "a2")["status"], "running", "{backend:?}: leased to w1, the batch's worker");

        // The answer was lost: the same batch again is answered as the first time, item by item.
        let resent = worker.complete_batch(batch).await.unwrap().into_inner();
        let (again_one, again_two) = (response(&resent.results[0]), response(&resent.results[1]));
        assert_eq!(again_one.next, one.next, "{backend:?}: the same attempts, not second ones");
        assert_eq!(again_two.next, two.next, "{backend:?}");
        let attempts = app.engine().store().attempts(&run).await.unwrap();
        assert_eq!(attempts.len(), 4, "{backend:?}: one attempt per step: {attempts:?}");
    }
}

#[tokio::test]
async fn a_batch_over_the_limit_is_refused_whole() {
    let backend = cairn_tests::backends()[0];
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let item = CompleteRequest { worker_id: "w1".into(), output_json: "{}".into(), ..CompleteRequest::default() };
    let batch = CompleteBatchRequest { worker_id: "w1".into(), items: vec![item; 257] };

    let refused = worker.complete_batch(batch).await.unwrap_err();

    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("at most 256"), "{refused:?}");
}
