//! A small tokenizer shaped like Qwen2's, trained on a corpus, for tests and the synthetic
//! demo (no 151k-token download).

use std::collections::HashSet;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::byte_level::ByteLevel as ByteLevelProcessor;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::error::TextError;
use super::tokenizer::QwenTokenizer;
use super::tokens::QWEN_SPECIAL_TOKENS;

/// Qwen2's pre-tokenisation regex (from its `tokenizer.json`), so that a tokenizer trained by
/// [`train_tokenizer`] splits text the same way the real one does.
const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Trains a byte-level BPE tokenizer shaped like Qwen2's (NFC, Qwen2's split regex, byte-level
/// alphabet, the Qwen special tokens as added special tokens) on `corpus`.
///
/// Tests and the synthetic demo use it instead of downloading the 151k-token vocabulary; the
/// result is a real `tokenizer.json` that [`QwenTokenizer::save`] can write next to a
/// checkpoint. The special tokens get ids `0..8` in [`QWEN_SPECIAL_TOKENS`] order; the
/// vocabulary holds at least the 256 byte symbols, so `vocab_size` below `264` yields 264.
pub fn train_tokenizer<I, S>(corpus: I, vocab_size: usize) -> Result<QwenTokenizer, TextError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let train_err = |e: tokenizers::Error| TextError::Train { message: e.to_string() };
    let specials: Vec<AddedToken> = QWEN_SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)).collect();
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(specials.clone())
        .initial_alphabet(alphabet)
        .build();
    let split = Split::new(SplitPattern::Regex(QWEN2_SPLIT_REGEX.to_string()), SplitDelimiterBehavior::Isolated, false).map_err(train_err)?;
    let byte_level = ByteLevel::new(false, false, false);
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer
        .with_normalizer(Some(NFC))
        .map_err(train_err)?
        .with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])))
        .with_post_processor(Some(ByteLevelProcessor::new(false, false, false)))
        .with_decoder(Some(ByteLevelDecoder::default()));
    let corpus: Vec<String> = corpus.into_iter().map(|s| s.as_ref().to_string()).collect();
    tokenizer.train(&mut TrainerWrapper::BpeTrainer(trainer), corpus.into_iter()).map_err(train_err)?;
    tokenizer.add_special_tokens(specials).map_err(train_err)?;
    QwenTokenizer::from_tokenizer(tokenizer)
}
