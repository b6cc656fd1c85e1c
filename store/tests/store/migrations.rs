//! Released migrations never change: sqlx records each applied migration's checksum, and a database whose
//! recorded checksum differs refuses to start ("migration N was previously applied but has been modified").
//! A change to the schema is a new migration. This test pins the checksum (SHA-384, as sqlx computes it) of every
//! migration; a new migration adds its line here.

use cairn_store::{POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use sqlx::migrate::Migrator;

fn checksums(migrator: &Migrator) -> Vec<(i64, String)> {
    migrator.iter().map(|m| (m.version, m.checksum.iter().map(|b| format!("{b:02x}")).collect::<String>())).collect()
}

fn pinned(list: &[(i64, &str)]) -> Vec<(i64, String)> {
    list.iter().map(|(v, c)| (*v, (*c).to_owned())).collect()
}

#[test]
fn no_sqlite_migration_changed_once_released() {
    let expected = pinned(&[
        (1, "ae4fdb87f195f5e507ee697eb6377c2f16cf9756525ca7bf6dcb09276a6abeca5b458b9addc1181388629a92943afd9b"),
        (2, "c3ebc05d8477b5bfc9f4e0fb1a3584706f9cd4126e6033f4f2e225a500a461e220ff630ba5df2804eab9c9d3eefd2917"),
        (3, "e3936d59a256447a2d2e587aa688e413e8b7ae0af8214aadaadb9417ec2e8706e767fd3f76e60962fd3a8002545ae9ed"),
        (4, "aa26b52540100c86e3fadabb90be86381f704891ff1a4311cb09f2ceab4051312eb24bcc9489f56a33a3f1fdba598c55"),
        (5, "c87bc762221ecb31f4a3bd854ae49e6107fc366a6510353899a030532c4ac5bd7822705e6d337da14a5a17e0c5a49d34"),
        (10, "09cb4b32d24cace044ffa62d68854cf991c0d69ff947355dd9c7768c9b76afece7df899400edaec616d0d6f2b142ab91"),
        (11, "cd1db8b2c677b9740dab3da243f0659568d52f0c71b2812597d836272ce46efd639bba70579ecc127746883238a31041"),
        (12, "72a90f3fcea90461ac9646b45e81c00c5e133f6b763e5c1653f9bab160fa32a8331fb92d3c122156c3650a9d580ee4e2"),
        (13, "56794654763723e217d822b92be4648675de24e010cc9ccf361b8b3a917fd706366c998f992837e94800175410908cb9"),
        (14, "26af60728454b10e25c9f92baf629f56d179b9575cdea8a449a09d3950067aa31efe7600c6eb633d8a15d7727d3ce40e"),
        (15, "ce3735e073869833a0b983d66eacc562782cee2ae3b395661c8485b0089d3a5ac8558e824fcba08c57bdffbe59c9a88e"),
        (16, "77c62523d984049960fb574c90ef8690f8c968172c66ec965eb0b34fb277cd1162fa832c4afab46932897d6f417fdc8c"),
        (17, "f8f348a4e9526d88101113c7c87bd7dbfb7324eab908584533f71e9808343129de2b20133b121f8653ba4f7b62047789"),
    ]);
    assert_eq!(checksums(&SQLITE_MIGRATIONS), expected, "add a migration instead of editing a released one");
}

#[test]
fn no_postgres_migration_changed_once_released() {
    let expected = pinned(&[
        (1, "9816e71593f0172289485b08314f2b50520383711d56410b7136104adf16daf5b5026749e2238070aa67e631a04ad737"),
        (2, "cd0d9ead8b8ebdb606a79ec18f649709388593677b7a103a00c7bf537dbcf1ec55651c23b5fa1ea327da4a776b119fc0"),
        (3, "c6ddd3f5692325016a755ad8dc5ec6ddd46ee4a2a112e523a3ec4caaf428a9b426e191d766da7116c9991df08935a084"),
        (4, "6800dbf1d66af7ac3888928a59b61ca468cdbbd8fecf5ddde1142c27ac178a61373acb1cd44d597224cd075896619666"),
        (5, "ba140fe6a276c074ffbde97d99e5bd552fbe1de89122d5d68c82f2a30620c17725e909f36a382546958da2d20e78283e"),
        (6, "9ce2b2caa958e6875797c2392af98eee450ca7b637a4e9f4f340a2fe7f7146f2970bf386c1405652974539a5e03f3043"),
        (7, "ec56bed1a07efa7fb30f917a8fad14e9c16450bab14be212cf125e563b5bad0be7cc7e0af632f2946b34977748ba6b5f"),
        (8, "a214de93de6f23f36afd5cb43e27d5e41f0e6f82a62b282349ec200d44b0717dae002afd043a30ddfb72c19d84b10e0c"),
        (9, "97142d9b52fedebfe7c6b3a7cee99ef27a80baa1ca5e5a560182e050eabac060f227aac0756baf9aaa22543e0bad7bf5"),
        (10, "09cb4b32d24cace044ffa62d68854cf991c0d69ff947355dd9c7768c9b76afece7df899400edaec616d0d6f2b142ab91"),
        (11, "d1f989676430c5bb4a7b0d4f39f331abd60488c87262194b9deebf5ba76c3ef1f2dc67302ed85486f41d3aab04012b55"),
        (12, "bdfdc7e3c333ac3f9eb36b5f2965d864178e08f065f421493f59eee92d766a4270b53ded69c3c5e202f8b3274f4cf619"),
        (13, "77976ff026056ae99f13520b31ea8c8f1b818af019844a3b7421ba0ad5ca2ee4d1b86e2dd47d209d6bd0081f31aa116a"),
        (14, "27036239c0cf3768bd6edf293df2ec8b4bf9100dbb9a2a90b0948d258de28f4e8a4ff1d6823e746bc517d8dc6d3f9e0f"),
        (15, "9550821ddfbf43ace0e800a89422ec82d644605c9bd5928bb406bfabaf871efc92048d04038da03ff8d319533301edc6"),
        (16, "4694170e5f8400c264d59dfbf2804c7221f4df95db87f9fea5bb134120d8d4e290b771b14e7fdf53c098f77e1230007f"),
        (17, "cf505119db2d077ed00227c87b7e311d9ae56c7e84ccd685b1738451af6e61e1d4c75ebef6423b24c46ebdec3e74e6d4"),
    ]);
    assert_eq!(checksums(&POSTGRES_MIGRATIONS), expected, "add a migration instead of editing a released one");
}
