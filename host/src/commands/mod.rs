//! The bodies of the `eventpipe` subcommands, as library functions the command line (`cli/`)
//! calls: [`run`] (`eventpipe run`), [`replay`] (`eventpipe replay`), [`golden`]
//! (`eventpipe test`), [`bench`](mod@bench) (`eventpipe bench`), [`validate`] (`eventpipe validate`),
//! [`top`] (`eventpipe top`) and [`scaffold`] (`eventpipe new-plugin`).

pub mod bench;
pub mod golden;
pub mod reach;
pub mod replay;
pub mod run;
pub mod scaffold;
pub mod top;
pub mod validate;
