# memopt claims: the two claims, measured. Four panels:
#   checkpointing: memory saving per policy (the claim's band [40%, 60%] shaded) | time overhead
#   mixed precision: peak saving per comparison (band [30%, 50%])                | speedup (band 2-3x)
# Defined by memopt claims: have_time, n_mp, mp_why, time_why, base (the model and the device).
# Each policy / comparison carries its verdict (the data files' last column), printed over its bars:
# the checkpointing verdicts on the memory panel, the mixed-precision ones on the speedup panel.
load scriptdir."/common.gp"
if (!exists("have_time")) have_time = 1
if (!exists("n_mp")) n_mp = 1
if (!exists("mp_why")) mp_why = ""
if (!exists("time_why")) time_why = "times need a GPU"
if (!exists("base")) base = ""
ck = data("claims_ckpt.dat")
mp = data("claims_precision.dat")
width = 1400
height = 900
bars = "set style data histograms; set style histogram clustered gap 1; set boxwidth 0.9; set xtics noenhanced; set key top right"
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("claims", fmt)
    set multiplot layout 2,2 title "Published claims, measured: ".base font ",13"
    vfont = ",10"

    reset; @style; @bars
    set title "Checkpointing: memory saving vs. ckpt none (claim: about 50% of activations)"
    set ylabel "saving (%)"
    set yrange [0:100]
    set object 1 rect from graph 0, first 40 to graph 1, first 60 fc rgb "#e8f5e9" fs solid 1.0 noborder behind
    set arrow 1 from graph 0, first 50 to graph 1, first 50 nohead dt 2 lc rgb "#2e7d32"
    set key top center horizontal
    set yrange [0:125]
    plot ck using 2:xtic(1) title "activation memory" lc rgb c_act, '' using 3 title "peak memory" lc rgb c_param, \
         '' using ($0):(($2 > $3 ? $2 : $3)):5 with labels offset 0,0.8 font vfont textcolor rgb "#202020" noenhanced notitle

    reset; @style; @bars
    set title "Checkpointing: time overhead vs. ckpt none (claim: about 20%; holds up to 30%)"
    if (!have_time) {
        eval(empty_panel(time_why))
    } else {
        set ylabel "overhead (%)"
        set yrange [0:40<*]
        set arrow 1 from graph 0, first 20 to graph 1, first 20 nohead dt 2 lc rgb "#2e7d32"
        set arrow 2 from graph 0, first 30 to graph 1, first 30 nohead lc rgb "#d62728"
        plot ck using 4:xtic(1) title "time overhead" lc rgb c_optim
    }

    reset; @style; @bars
    set title "Mixed precision: peak memory saving (claim: about 40%)"
    if (n_mp == 0) {
        eval(empty_panel("not measured: ".mp_why))
    } else {
        set ylabel "saving (%)"
        set yrange [0:100]
        set object 1 rect from graph 0, first 30 to graph 1, first 50 fc rgb "#e8f5e9" fs solid 1.0 noborder behind
        set key top center horizontal
        set yrange [0:125]
        plot mp using 2:xtic(1) title "peak memory saving" lc rgb c_param
    }

    reset; @style; @bars
    set title "Mixed precision: speedup (claim: 2-3x)"
    if (n_mp == 0 || !have_time) {
        eval(empty_panel(n_mp == 0 ? "not measured: ".mp_why : time_why))
    } else {
        set ylabel "speedup (x)"
        set yrange [0:4<*]
        set object 1 rect from graph 0, first 2 to graph 1, first 3 fc rgb "#e8f5e9" fs solid 1.0 noborder behind
        plot mp using 3:xtic(1) title "speedup" lc rgb c_grad, \
             '' using ($0):($3):4 with labels offset 0,0.8 font vfont textcolor rgb "#202020" noenhanced notitle
    }
    unset multiplot
    set output
}
