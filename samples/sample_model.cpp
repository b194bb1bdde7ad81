// What every sample model shares: its loss and its predictions, both from the model's one walk.
#include "samples/models.h"

namespace edb::samples {

Expr SampleModel::record_loss(Trace& trace, size_t i) {
  std::vector<Expr> losses;
  record(trace, i, [&](const Prediction& p) { losses.push_back(pick_neg_log_softmax(p.scores, p.gold)); });
  return sum(losses);
}

std::vector<Prediction> SampleModel::record_predictions(Trace& trace, size_t i) {
  std::vector<Prediction> predictions;
  record(trace, i, [&](const Prediction& p) { predictions.push_back(p); });
  return predictions;
}

}  // namespace edb::samples
