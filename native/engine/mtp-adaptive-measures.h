#pragma once

// pymtp: the adaptive controller's measurements (mtp-adaptive.h): running means of timed costs, a line
// through verify costs, and exponentially decayed rates and counts.

#include <algorithm>
#include <cstdint>

namespace mtp {

// A quantity measured over and over: the first sample only until a second replaces it (a first decode
// of a shape is cold: graph building, CUDA graph capture), then the plain mean, then an exponential
// average that follows drift (a machine under other load, a longer context).
struct running_mean {
    double  v = 0.0;
    int64_t n = 0;

    void add(double x, double w = 0.1) {
        n++;
        const double m = (double) std::max<int64_t>(1, n - 1); // samples in the mean, the cold one dropped
        v += (n <= 2 ? 1.0 : std::max(w, 1.0 / m)) * (x - v);
    }
};

// A weighted least-squares line through points (n, y): verify costs by batch size. Its slope is at least 0.
struct line_fit {
    double  sw = 0.0, sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
    int32_t points = 0;
    int32_t last   = 0; // the n of the last point added

    void add(int32_t n, double y, double w = 1.0) {
        sw += w;
        sx += w * n;
        sy += w * y;
        sxx += w * n * n;
        sxy += w * n * y;
        points++;
        last = n;
    }

    // the line's value at n (two points or more)
    double at(int32_t n) const {
        const double slope = std::max(0.0, (sw * sxy - sx * sy) / std::max(1e-12, sw * sxx - sx * sx));
        return (sy - slope * sx) / sw + slope * n;
    }
};

// A ratio of two exponentially decayed sums over windows: tokens per ms of a kind of step as measured end
// to end, or the share of a kind of window's steps that drafted.
struct realized_rate {
    double tok = 0.0;
    double ms  = 0.0;
    double n   = 0.0;

    void add(double tokens, double time_ms, double keep) {
        tok = keep * tok + tokens;
        ms  = keep * ms + time_ms;
        n   = keep * n + 1.0;
    }
    double get() const { return ms > 0.0 ? tok / ms : 0.0; }
};

// Time per step of a kind of step as measured end to end (exponentially decayed sums).
struct realized_cost {
    double ms = 0.0;
    double n  = 0.0;

    void add(double time_ms, double steps, double keep) {
        ms = keep * ms + time_ms;
        n  = keep * n + steps;
    }
    double get() const { return n > 0.0 ? ms / n : 0.0; }
};

// A success rate from exponentially decayed counts, shrunk towards a prior with a weight of
// pseudo-observations.
struct decayed_rate {
    double s = 0.0;
    double n = 0.0;

    void add(bool ok, double keep) {
        s = keep * s + (ok ? 1.0 : 0.0);
        n = keep * n + 1.0;
    }
    double get(double prior, double weight) const { return (s + prior * weight) / (n + weight); }
};

} // namespace mtp
