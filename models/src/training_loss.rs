//! The training loss of a batch and its gradients, with the two vocabulary-sized matrices — the
//! token embedding and the LM head, `[vocab, hidden]` (311 MB each in f32 at Qwen's 151,936
//! tokens and a hidden size of 512) — differentiated here instead of by Candle's autograd.
//!
//! Candle's backward adds every gradient into a fresh zero tensor, and the gradient of a matmul
//! against a transposed weight is made transposed and then added once more into the weight's own
//! zero tensor: at the LM head three vocab-sized tensors are alive at once, at the embedding two,
//! while the whole forward graph is still held. Here the head's gradient is one matmul,
//! `dW = dZᵀ h`; the embedding's is one zero tensor into which the looked-up rows' gradients are
//! added in place; and both are made after the decoder's backward has let go of the forward
//! graph. Everything else (decoder, vision tower, connector, LoRA) is back-propagated by Candle
//! from the head input's gradient, so the parameters get exactly the gradients of
//! `loss.backward()`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, D, DType, InplaceOp2, Layout, Tensor, Var};

use crate::error::Result;
use crate::ops::Linear;

/// The rows a prompt looked up in a trained embedding, as a leaf of the graph: the decoder's
/// backward stops at them and [`TrainingLoss::backward`] scatters their gradient into the matrix.
pub(crate) struct EmbeddingLeaf {
    weight: Tensor,
    ids: Tensor,
    rows: Var,
}

impl EmbeddingLeaf {
    /// `ids` `[N]` u32 → the leaf `[N, hidden]`.
    pub(crate) fn lookup(weight: &Tensor, ids: &Tensor) -> Result<Self> {
        let rows = Var::from_tensor(&weight.detach().index_select(ids, 0)?)?;
        Ok(Self { weight: weight.clone(), ids: ids.clone(), rows })
    }

    pub(crate) fn rows(&self) -> &Tensor {
        self.rows.as_tensor()
    }
}

/// The mean next-token cross-entropy of a batch, ready to be differentiated once.
pub struct TrainingLoss {
    /// Scalar f32, without a graph.
    loss: Tensor,
    head: HeadBackward,
    embedding: Option<EmbeddingLeaf>,
}

enum HeadBackward {
    /// A head without adapter or bias: its input's and weight's gradients from the log-probs.
    Direct {
        /// Decoder states of the labelled positions `[n, hidden]`, with their graph.
        chosen: Tensor,
        weight: Tensor,
        /// `[n, vocab]` f32.
        log_probs: Tensor,
        /// `[n]` u32.
        targets: Tensor,
    },
    /// Anything else through the LM head goes through Candle's autograd.
    Autograd(Tensor),
}

impl TrainingLoss {
    /// The loss of `targets` `[n]` given the labelled positions' decoder states `chosen`
    /// `[n, hidden]`, through `head`; `embedding` when the prompt's rows are a leaf.
    pub(crate) fn new(head: &Linear, chosen: Tensor, targets: &[u32], embedding: Option<EmbeddingLeaf>) -> Result<Self> {
        let device = chosen.device().clone();
        let targets = Tensor::new(targets, &device)?;
        if head.adapter().is_some() || head.bias().is_some() {
            let log_probs = log_softmax_f32(&candle_core::Module::forward(head, &chosen)?)?;
            let loss = mean_nll(&log_probs, &targets)?;
            return Ok(Self { loss: loss.detach(), head: HeadBackward::Autograd(loss), embedding });
        }
        let weight = head.weight().clone();
        let log_probs = log_softmax_f32(&chosen.detach().matmul(&weight.detach().t()?)?)?;
        let loss = mean_nll(&log_probs, &targets)?;
        Ok(Self { loss, head: HeadBackward::Direct { chosen, weight, log_probs, targets }, embedding })
    }

    /// The scalar loss (f32, no graph).
    pub fn loss(&self) -> &Tensor {
        &self.loss
    }

    /// The loss as a number (what the trainer logs and checks for finiteness before `backward`).
    pub fn value(&self) -> Result<f64> {
        Ok(self.loss.to_dtype(DType::F64)?.to_scalar::<f64>()?)
    }

    /// Gradients of `scale × loss` for every variable the loss depends on, as
    /// `(scale × loss).backward()` would give them.
    pub fn backward(self, scale: f64) -> Result<GradStore> {
        let (mut grads, head_grad) = match self.head {
            HeadBackward::Autograd(loss) => ((loss * scale)?.backward()?, None),
            HeadBackward::Direct { chosen, weight, log_probs, targets } => {
                let (n, vocab) = log_probs.dims2()?;
                let one_hot = targets.unsqueeze(1)?.broadcast_eq(&Tensor::arange(0u32, vocab as u32, log_probs.device())?.unsqueeze(0)?)?;
                // d(mean NLL)/d(logits) = (softmax − one-hot) / n.
                let logits_grad = ((log_probs.exp()? - one_hot.to_dtype(DType::F32)?)? * (scale / n as f64))?.to_dtype(weight.dtype())?;
                let chosen_values = chosen.detach();
                let chosen_grad = logits_grad.matmul(&weight.detach())?.to_dtype(chosen.dtype())?;
                // Σ chosen ⊙ g has gradient g with respect to `chosen`: Candle takes it from there.
                let grads = (chosen * chosen_grad)?.sum_all()?.backward()?;
                let head_grad = match weight.is_variable() {
                    true => {
                        let grad = logits_grad.t()?.matmul(&chosen_values.to_dtype(weight.dtype())?)?;
                        Some((weight, grad))
                    }
                    false => None,
                };
                (grads, head_grad)
            }
        };
        // The head's gradient is a fresh tensor: a tied embedding adds its rows into it in place.
        let fresh = head_grad.map(|(weight, grad)| {
            grads.insert(&weight, grad);
            weight.id()
        });
        if let Some(leaf) = self.embedding {
            let rows_grad = grads.remove(leaf.rows());
            if let Some(rows_grad) = rows_grad {
                let grad = match (grads.remove(&leaf.weight), fresh) {
                    (Some(existing), Some(id)) if id == leaf.weight.id() => add_rows(existing, &leaf.ids, &rows_grad)?,
                    (Some(existing), _) => existing.index_add(&leaf.ids, &rows_grad, 0)?,
                    (None, _) => add_rows(leaf.weight.zeros_like()?, &leaf.ids, &rows_grad)?,
                };
                grads.insert(&leaf.weight, grad);
            }
        }
        Ok(grads)
    }
}

/// How many positions of one row's `labels` a next-token loss predicts: the labelled ones
/// after the first (the first token is never a target). The denominator of the row's share of
/// [`TrainingLoss`]'s mean, and what token-weighted gradient accumulation weighs it by.
pub fn predicted_label_count(labels: &[i64]) -> usize {
    labels.iter().skip(1).filter(|&&l| l != -100).count()
}

/// Log-probabilities over the last dimension, computed in f32 whatever the logits' dtype.
pub(crate) fn log_softmax_f32(logits: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::log_softmax(&logits.to_dtype(DType::F32)?, D::Minus1)?)
}

/// Mean negative log-likelihood of `targets` `[n]` under `log_probs` `[n, vocab]`.
pub(crate) fn mean_nll(log_probs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let n = targets.dim(0)?;
    let picked = log_probs.gather(&targets.unsqueeze(1)?, 1)?;
    Ok((picked.sum_all()? / -(n as f64))?)
}

/// `matrix[ids[i]] += rows[i]`, in place where it can be (a contiguous f32 CPU matrix; callers
/// pass one no other tensor shares), else as a new tensor.
fn add_rows(matrix: Tensor, ids: &Tensor, rows: &Tensor) -> Result<Tensor> {
    let rows = rows.contiguous()?;
    if matrix.device().is_cpu() && matrix.dtype() == DType::F32 && rows.dtype() == DType::F32 && matrix.is_contiguous() {
        let ids = ids.to_vec1::<u32>()?;
        matrix.inplace_op2(&rows, &AddRows { ids })?;
        return Ok(matrix);
    }
    Ok(matrix.index_add(ids, &rows, 0)?)
}

struct AddRows {
    ids: Vec<u32>,
}

impl InplaceOp2 for AddRows {
    fn name(&self) -> &'static str {
        "add-rows"
    }

    fn cpu_fwd(&self, matrix: &mut CpuStorage, matrix_layout: &Layout, rows: &CpuStorage, rows_layout: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(matrix), CpuStorage::F32(rows)) = (matrix, rows) else { candle_core::bail!("{}: f32 only", self.name()) };
        let (Some((m0, m1)), Some((r0, r1))) = (matrix_layout.contiguous_offsets(), rows_layout.contiguous_offsets()) else {
            candle_core::bail!("{}: both operands must be contiguous", self.name())
        };
        let (matrix, rows) = (&mut matrix[m0..m1], &rows[r0..r1]);
        let width = matrix_layout.dims()[1];
        let vocab = matrix_layout.dims()[0];
        if rows.len() != self.ids.len() * width {
            candle_core::bail!("{}: {} ids for {} values of width {width}", self.name(), self.ids.len(), rows.len())
        }
        for (&id, row) in self.ids.iter().zip(rows.chunks_exact(width)) {
            let id = id as usize;
            if id >= vocab {
                candle_core::bail!("{}: id {id} outside {vocab} rows", self.name())
            }
            for (acc, g) in matrix[id * width..(id + 1) * width].iter_mut().zip(row) {
                *acc += g;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    use super::*;

    /// Two micro-batches of one gradient-accumulation window: one predicts 1 token, the other 3.
    const VOCAB: usize = 5;
    const HIDDEN: usize = 3;

    fn weight() -> Vec<f32> {
        (0..VOCAB * HIDDEN).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.13).collect()
    }

    fn micro_batches() -> [(Vec<f32>, Vec<u32>); 2] {
        [(vec![0.9, -0.4, 0.3], vec![2]), (vec![0.2, 0.7, -1.1, -0.6, 0.1, 0.8, 1.3, -0.2, 0.05], vec![4, 0, 2])]
    }

    /// `dW` of Σ_t w_t · NLL_t by hand, in f64: `(softmax(W h_t) − onehot(y_t)) ⊗ h_t` per token.
    fn by_hand(token_weight: impl Fn(usize, usize) -> f64) -> Vec<f64> {
        let w = weight();
        let mut grad = vec![0.0; VOCAB * HIDDEN];
        for (micro, (states, targets)) in micro_batches().iter().enumerate() {
            for (t, &y) in targets.iter().enumerate() {
                let h = &states[t * HIDDEN..(t + 1) * HIDDEN];
                let logits: Vec<f64> = (0..VOCAB).map(|v| (0..HIDDEN).map(|k| f64::from(w[v * HIDDEN + k]) * f64::from(h[k])).sum()).collect();
                let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                for v in 0..VOCAB {
                    let d = (logits[v] - max).exp() / sum - if v == y as usize { 1.0 } else { 0.0 };
                    for k in 0..HIDDEN {
                        grad[v * HIDDEN + k] += token_weight(micro, targets.len()) * d * f64::from(h[k]);
                    }
                }
            }
        }
        grad
    }

    /// The head's gradient accumulated over both micro-batches, each backward scaled by `scale`.
    fn accumulated(scale: impl Fn(usize) -> f64) -> Vec<f32> {
        let device = Device::Cpu;
        let w = Var::from_tensor(&Tensor::from_vec(weight(), (VOCAB, HIDDEN), &device).unwrap()).unwrap();
        let head = Linear::from_parts(w.as_tensor().clone(), None);
        let mut total = w.as_tensor().zeros_like().unwrap();
        for (states, targets) in micro_batches() {
            let n = targets.len();
            let chosen = Var::from_tensor(&Tensor::from_vec(states, (n, HIDDEN), &device).unwrap()).unwrap();
            let loss = TrainingLoss::new(&head, chosen.as_tensor().clone(), &targets, None).unwrap();
            let grads = loss.backward(scale(n)).unwrap();
            total = (total + grads.get(w.as_tensor()).expect("the head's gradient")).unwrap();
        }
        total.flatten_all().unwrap().to_vec1().unwrap()
    }

    fn assert_close(got: &[f32], want: &[f64], what: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{what}: element {i}: {g} against {w}");
        }
    }

    #[test]
    fn token_weights_give_the_mean_over_the_windows_tokens() {
        let tokens: usize = micro_batches().iter().map(|m| m.1.len()).sum();
        let got = accumulated(|n| n as f64 / tokens as f64);
        assert_close(&got, &by_hand(|_, _| 1.0 / tokens as f64), "token-weighted");
        // Not the mean of the micro-batch means: the 3-token batch weighs 3/4, not 1/2.
        let micro = by_hand(|_, n| 0.5 / n as f64);
        assert!(got.iter().zip(&micro).any(|(g, m)| (f64::from(*g) - m).abs() > 1e-3));
    }

    #[test]
    fn micro_batch_weights_give_the_mean_of_the_micro_batch_means() {
        assert_close(&accumulated(|_| 0.5), &by_hand(|_, n| 0.5 / n as f64), "micro-batch");
    }

    #[test]
    fn predicted_labels_skip_the_first_position_and_ignored_ones() {
        assert_eq!(predicted_label_count(&[7, -100, 3, 4, -100, 9]), 3);
        assert_eq!(predicted_label_count(&[]), 0);
    }
}
