//! Recipients (migration 0017): put creates then replaces (keeping when it was created), reads by id and by a
//! list of ids, keyset pages in byte order of the id, and deletion.

use cairn_store::{Store, StoredRecipient};

use super::support::T0;

/// A recipient body (the store keeps it as given; the API checks it with `Recipient::parse` first).
fn body(chat_id: &str) -> String {
    format!(r#"{{"channels": {{"telegram": {{"chat_id": "{chat_id}"}}}}}}"#)
}

async fn put(store: &Store, id: &str, now: i64) -> bool {
    store.recipient_put(id, &body(id), now).await.expect("recipient_put")
}

fn ids(recipients: &[StoredRecipient]) -> Vec<&str> {
    recipients.iter().map(|r| r.id.as_str()).collect()
}

async fn a_put_creates_then_replaces_keeping_when_it_was_created(store: Store) {
    assert!(store.recipient_put("alice", &body("1"), T0).await.expect("put"), "the first put creates");
    let created = store.recipient_get("alice").await.expect("get").expect("alice is stored");
    assert_eq!(created, StoredRecipient { id: "alice".into(), body: body("1"), created_at: T0, updated_at: T0 });

    let created_again = store.recipient_put("alice", &body("2"), T0 + 5).await.expect("put");

    assert!(!created_again, "a put of a stored id replaces it");
    let replaced = store.recipient_get("alice").await.expect("get").expect("alice is stored");
    assert_eq!(
        replaced,
        StoredRecipient { id: "alice".into(), body: body("2"), created_at: T0, updated_at: T0 + 5 },
        "the body and updated_at are replaced, created_at is kept"
    );
}

async fn recipients_are_read_by_id_and_by_a_list_of_ids(store: Store) {
    for id in ["carol", "alice", "bob"] {
        put(&store, id, T0).await;
    }
    assert_eq!(store.recipient_get("dave").await.expect("get"), None, "an id never put reads as absent");
    let asked: Vec<String> = ["carol", "dave", "alice", "carol"].into_iter().map(String::from).collect();

    let found = store.recipients_get(&asked).await.expect("recipients_get");

    assert_eq!(ids(&found), ["alice", "carol"], "the stored ones, in id order, each once");
    assert_eq!(found[0].body, body("alice"));
    assert!(store.recipients_get(&[]).await.expect("recipients_get").is_empty(), "no ids, no recipients");
}

async fn a_long_list_of_ids_is_read_whole(store: Store) {
    let stored: Vec<String> = (0..150).map(|n| format!("r{n:03}")).collect();
    for id in &stored {
        put(&store, id, T0).await;
    }
    let mut asked: Vec<String> = (0..160).rev().map(|n| format!("r{n:03}")).collect();
    asked.push("r000".into());

    let found = store.recipients_get(&asked).await.expect("recipients_get");

    assert_eq!(ids(&found), stored.iter().map(String::as_str).collect::<Vec<_>>(), "beyond one statement's ids");
}

async fn pages_follow_the_ids_in_byte_order(store: Store) {
    for id in ["b", "_x", "a", "B", "c.d", "a-b"] {
        put(&store, id, T0).await;
    }
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.recipients_page(after.as_deref(), 2).await.expect("recipients_page");
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 2, "a page holds at most the limit");
        after = Some(last.id.clone());
        pages.push(ids(&page).into_iter().map(String::from).collect::<Vec<_>>());
    }

    assert_eq!(
        pages,
        [vec!["B", "_x"], vec!["a", "a-b"], vec!["b", "c.d"]],
        "every recipient once, in byte order of the id (the same on both backends)"
    );
    let first = store.recipients_page(None, 0).await.expect("recipients_page");
    assert!(first.is_empty(), "a limit of 0 reads nothing");
}

async fn a_deleted_recipient_is_gone_and_may_be_created_again(store: Store) {
    put(&store, "alice", T0).await;
    put(&store, "bob", T0).await;

    assert!(store.recipient_delete("alice").await.expect("delete"), "a stored recipient is deleted");
    assert!(!store.recipient_delete("alice").await.expect("delete"), "a second delete finds nothing");

    assert_eq!(store.recipient_get("alice").await.expect("get"), None);
    assert_eq!(ids(&store.recipients_page(None, 10).await.expect("page")), ["bob"], "the other stays");
    assert!(put(&store, "alice", T0 + 9).await, "a put after the delete creates it again");
    let again = store.recipient_get("alice").await.expect("get").expect("alice is stored");
    assert_eq!((again.created_at, again.updated_at), (T0 + 9, T0 + 9), "a new recipient, with new times");
}

contract_tests!(
    a_put_creates_then_replaces_keeping_when_it_was_created,
    recipients_are_read_by_id_and_by_a_list_of_ids,
    a_long_list_of_ids_is_read_whole,
    pages_follow_the_ids_in_byte_order,
    a_deleted_recipient_is_gone_and_may_be_created_again,
);
